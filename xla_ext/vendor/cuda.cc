#include "xla_ext/vendor/cuda.h"

#include <dlfcn.h>

#include <mutex>
#include <sstream>
#include <vector>

namespace jaxmg::cuda {
namespace {

Api* g_api = nullptr;

struct Library {
  const char* what;       // for messages
  std::string remedy;     // how to get it
  std::vector<const char*> sonames;  // CUDA 13 first, then CUDA 12
};

std::string FromPip(const char* package) {
  return std::string("install it with `pip install ") + package +
         "` (or jax[cuda13]), or put a CUDA toolkit's lib64 on LD_LIBRARY_PATH";
}

// Dependencies first: cuSOLVERMg needs cuBLAS(Lt) and cudart already loaded
// when its own directory is not on the loader's path.
const Library kRuntime{"the CUDA runtime", FromPip("nvidia-cuda-runtime"),
                       {"libcudart.so.13", "libcudart.so.12"}};
const Library kBlasLt{"cuBLASLt", FromPip("nvidia-cublas"),
                      {"libcublasLt.so.13", "libcublasLt.so.12"}};
const Library kBlas{"cuBLAS", FromPip("nvidia-cublas"), {"libcublas.so.13", "libcublas.so.12"}};
const Library kSolver{"cuSOLVER", FromPip("nvidia-cusolver"),
                      {"libcusolver.so.12", "libcusolver.so.11"}};
const Library kSolverMg{"cuSOLVERMg", FromPip("nvidia-cusolver"),
                        {"libcusolverMg.so.12", "libcusolverMg.so.11"}};

std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> dirs;
  std::stringstream in(path);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    if (!dir.empty()) dirs.push_back(dir);
  }
  return dirs;
}

Status Open(const Library& lib, const std::vector<std::string>& dirs, void** handle) {
  std::string tried;
  for (const char* soname : lib.sonames) {
    for (const std::string& dir : dirs) {
      const std::string path = dir + "/" + soname;
      if ((*handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL))) return Status::Ok();
    }
    if ((*handle = dlopen(soname, RTLD_NOW | RTLD_GLOBAL))) return Status::Ok();
    tried += std::string(tried.empty() ? "" : ", ") + soname;
  }
  const char* reason = dlerror();
  std::string searched;
  for (const std::string& dir : dirs) searched += (searched.empty() ? "" : ", ") + dir;
  return Errorf("jaxmg: cannot load ", lib.what, " (", tried, ") from [", searched,
                "] or the system library path: ", reason ? reason : "not found", "; ",
                lib.remedy, ".");
}

template <typename Fn>
Status Resolve(void* handle, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*out == nullptr) return Errorf("jaxmg: symbol ", name, " missing from its CUDA library");
  return Status::Ok();
}

Status LoadAll(const std::string& search_path) {
  const std::vector<std::string> dirs = Split(search_path);
  void* runtime = nullptr;
  void* blas_lt = nullptr;
  void* blas = nullptr;
  void* dense = nullptr;
  void* solver = nullptr;
  JAXMG_RETURN_IF_ERROR(Open(kRuntime, dirs, &runtime));
  JAXMG_RETURN_IF_ERROR(Open(kBlasLt, dirs, &blas_lt));
  JAXMG_RETURN_IF_ERROR(Open(kBlas, dirs, &blas));
  JAXMG_RETURN_IF_ERROR(Open(kSolver, dirs, &dense));
  JAXMG_RETURN_IF_ERROR(Open(kSolverMg, dirs, &solver));
  auto* table = new Api();
#define JAXMG_RESOLVE_RUNTIME(name) JAXMG_RETURN_IF_ERROR(Resolve(runtime, #name, &table->name));
#define JAXMG_RESOLVE_BLAS(name) JAXMG_RETURN_IF_ERROR(Resolve(blas, #name, &table->name));
#define JAXMG_RESOLVE_DENSE(name) JAXMG_RETURN_IF_ERROR(Resolve(dense, #name, &table->name));
#define JAXMG_RESOLVE_SOLVER(name) JAXMG_RETURN_IF_ERROR(Resolve(solver, #name, &table->name));
  JAXMG_CUDART_FUNCTIONS(JAXMG_RESOLVE_RUNTIME)
  JAXMG_CUBLAS_FUNCTIONS(JAXMG_RESOLVE_BLAS)
  JAXMG_CUSOLVERDN_FUNCTIONS(JAXMG_RESOLVE_DENSE)
  JAXMG_CUSOLVERMG_FUNCTIONS(JAXMG_RESOLVE_SOLVER)
#undef JAXMG_RESOLVE_RUNTIME
#undef JAXMG_RESOLVE_BLAS
#undef JAXMG_RESOLVE_DENSE
#undef JAXMG_RESOLVE_SOLVER
  g_api = table;
  return Status::Ok();
}

}  // namespace

Status Load(const std::string& search_path) {
  static std::once_flag once;
  static Status* outcome = nullptr;
  std::call_once(once, [&] { outcome = new Status(LoadAll(search_path)); });
  return *outcome;
}

bool Loaded() { return g_api != nullptr; }

const Api& api() { return *g_api; }

DeviceGuard::DeviceGuard() {
  if (g_api->cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
}

DeviceGuard::~DeviceGuard() {
  if (saved_ >= 0) g_api->cudaSetDevice(saved_);
}

Status CudaError(cudaError_t code, const char* expr, const char* file, int line) {
  const char* text = g_api ? g_api->cudaGetErrorString(code) : "unknown";
  return Errorf("jaxmg: CUDA error ", static_cast<int>(code), " (", text, ") in ", expr, " at ",
                file, ":", line);
}

Status CusolverError(cusolverStatus_t code, const char* expr, const char* file, int line) {
  static const char* kNames[] = {"SUCCESS", "NOT_INITIALIZED", "ALLOC_FAILED", "INVALID_VALUE",
                                 "ARCH_MISMATCH", "MAPPING_ERROR", "EXECUTION_FAILED",
                                 "INTERNAL_ERROR", "MATRIX_TYPE_NOT_SUPPORTED",
                                 "NOT_SUPPORTED"};
  const int c = static_cast<int>(code);
  const char* name = c >= 0 && c < 10 ? kNames[c] : nullptr;
  switch (code) {
    case CUSOLVER_STATUS_IRS_PARAMS_INVALID_PREC: name = "IRS_PARAMS_INVALID_PREC"; break;
    case CUSOLVER_STATUS_IRS_PARAMS_INVALID_REFINE: name = "IRS_PARAMS_INVALID_REFINE"; break;
    case CUSOLVER_STATUS_IRS_PARAMS_INVALID_MAXITER: name = "IRS_PARAMS_INVALID_MAXITER"; break;
    case CUSOLVER_STATUS_IRS_INTERNAL_ERROR: name = "IRS_INTERNAL_ERROR"; break;
    case CUSOLVER_STATUS_IRS_NOT_SUPPORTED: name = "IRS_NOT_SUPPORTED"; break;
    case CUSOLVER_STATUS_IRS_OUT_OF_RANGE: name = "IRS_OUT_OF_RANGE"; break;
    case CUSOLVER_STATUS_IRS_NRHS_NOT_SUPPORTED_FOR_REFINE_GMRES:
      name = "IRS_NRHS_NOT_SUPPORTED_FOR_REFINE_GMRES";
      break;
    default: break;
  }
  return Errorf("jaxmg: cuSOLVER error ", c, " (CUSOLVER_STATUS_",
                name ? name : "see cusolver_common.h", ") in ", expr, " at ", file, ":", line);
}

Status CublasError(cublasStatus_t code, const char* expr, const char* file, int line) {
  return Errorf("jaxmg: cuBLAS error ", static_cast<int>(code), " in ", expr, " at ", file, ":",
                line);
}

}  // namespace jaxmg::cuda
