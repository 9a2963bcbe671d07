#include "xla_ext/vendor/cusolvermp.h"

#include <dlfcn.h>

#include <mutex>
#include <sstream>
#include <vector>

namespace jaxmg::cusolvermp {
namespace {

Api* g_api = nullptr;

Status Open(const char* soname, const char* what, const char* remedy,
            const std::string& search_path, void** handle) {
  std::stringstream in(search_path);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    if (dir.empty()) continue;
    if ((*handle = dlopen((dir + "/" + soname).c_str(), RTLD_NOW | RTLD_GLOBAL))) {
      return Status::Ok();
    }
  }
  if ((*handle = dlopen(soname, RTLD_NOW | RTLD_GLOBAL))) return Status::Ok();
  const char* reason = dlerror();
  return Errorf("jaxmg: cannot load ", what, " (", soname, ") from [", search_path,
                "] or the system library path: ", reason ? reason : "not found", "; ", remedy);
}

template <typename Fn>
Status Resolve(void* handle, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*out == nullptr) {
    return Errorf("jaxmg: symbol ", name, " is missing from its library (cuSOLVERMp or NCCL "
                  "older than this build's headers: cuSOLVERMp 0.8, NCCL 2.28)");
  }
  return Status::Ok();
}

Status LoadAll(const std::string& search_path) {
  if (!cuda::Loaded()) return Status::Error("jaxmg: load the CUDA runtime before cuSOLVERMp");
  void* nccl = nullptr;
  void* solver = nullptr;
  JAXMG_RETURN_IF_ERROR(Open("libnccl.so.2", "NCCL", "install it with `pip install nvidia-nccl-cu13`",
                             search_path, &nccl));
  JAXMG_RETURN_IF_ERROR(Open("libcusolverMp.so.0", "cuSOLVERMp",
                             "install it with `pip install nvidia-cusolvermp-cu13` (0.8 loads "
                             "against NCCL 2.28; 0.9 needs a newer NCCL); it also needs the "
                             "NVIDIA driver's libcuda.so.1",
                             search_path, &solver));
  auto* table = new Api();
#define JAXMG_RESOLVE_NCCL(name) JAXMG_RETURN_IF_ERROR(Resolve(nccl, #name, &table->name));
#define JAXMG_RESOLVE_SOLVER(name) JAXMG_RETURN_IF_ERROR(Resolve(solver, #name, &table->name));
  JAXMG_NCCL_FUNCTIONS(JAXMG_RESOLVE_NCCL)
  JAXMG_CUSOLVERMP_FUNCTIONS(JAXMG_RESOLVE_SOLVER)
#undef JAXMG_RESOLVE_NCCL
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

Status NcclError(ncclResult_t code, const char* expr, const char* file, int line) {
  const char* text = g_api ? g_api->ncclGetErrorString(code) : "unknown";
  return Errorf("jaxmg: NCCL error ", static_cast<int>(code), " (", text, ") in ", expr, " at ",
                file, ":", line);
}

}  // namespace jaxmg::cusolvermp
