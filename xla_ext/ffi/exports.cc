// Plain C entry points the Python package calls through ctypes.
#include <cstdint>
#include <cstring>
#include <vector>

#include "xla_ext/engines/lapack/lapack.h"
#include "xla_ext/engines/mp/solvers.h"
#include "xla_ext/ffi/registry.h"
#include "xla_ext/rendezvous/processes.h"
#include "xla_ext/rendezvous/rendezvous.h"
#include "xla_ext/vendor/cuda.h"
#include "xla_ext/vendor/cusolvermp.h"

namespace {

int Report(const jaxmg::Status& s, char* error, size_t error_size) {
  if (s.ok()) return 0;
  if (error_size > 0) {
    std::strncpy(error, s.message().c_str(), error_size - 1);
    error[error_size - 1] = '\0';
  }
  return 1;
}

}  // namespace

extern "C" {

// Every FFI target of the library (registry.h); *count receives how many.
const jaxmg::FfiTarget* jaxmg_targets(int64_t* count) {
  const std::vector<jaxmg::FfiTarget>& targets = jaxmg::FfiTargets();
  *count = static_cast<int64_t>(targets.size());
  return targets.data();
}

// Hands one LAPACK routine (by name, e.g. "zheevd") to the CPU engine.
// Returns 1 if the name is one this library uses, 0 otherwise.
int jaxmg_register_lapack(const char* name, void* fn) {
  return jaxmg::lapack::Register(name, fn) ? 1 : 0;
}

int64_t jaxmg_live_meetings() { return jaxmg::rendezvous::LiveMeetings(); }

// Loads cudart, cuBLAS and cuSOLVERMg from the ':'-separated directories
// (then the system path). Returns 0 on success; otherwise writes the reason
// into `error` (NUL-terminated, at most `error_size` bytes) and returns 1.
int jaxmg_cuda_init(const char* search_path, char* error, size_t error_size) {
  return Report(jaxmg::cuda::Load(search_path ? search_path : ""), error, error_size);
}

// Loads NCCL and cuSOLVERMp (after jaxmg_cuda_init). 0, or 1 with the reason.
int jaxmg_cusolvermp_init(const char* search_path, char* error, size_t error_size) {
  return Report(jaxmg::cusolvermp::Load(search_path ? search_path : ""), error, error_size);
}

// A fresh NCCL unique id as 256 hex digits (+ NUL) in `hex`.
int jaxmg_nccl_unique_id(char* hex, char* error, size_t error_size) {
  ncclUniqueId id;
  ncclResult_t r = jaxmg::cusolvermp::api().ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    return Report(jaxmg::cusolvermp::NcclError(r, "ncclGetUniqueId", __FILE__, __LINE__), error,
                  error_size);
  }
  static const char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    const auto byte = static_cast<unsigned char>(id.internal[i]);
    hex[2 * i] = kDigits[byte >> 4];
    hex[2 * i + 1] = kDigits[byte & 15];
  }
  hex[2 * sizeof(id.internal)] = '\0';
  return 0;
}

// cuSOLVERMp's version (major * 1000 + minor * 100 + patch) through GPU
// `device`'s handle.
int jaxmg_cusolvermp_version(int device, int* version, char* error, size_t error_size) {
  static cudaStream_t stream = nullptr;  // the handle keeps it; made once
  const jaxmg::cuda::Api& rt = jaxmg::cuda::api();
  jaxmg::cuda::DeviceGuard guard;
  if (stream == nullptr) {
    cudaError_t e = rt.cudaSetDevice(device);
    if (e == cudaSuccess) e = rt.cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      return Report(jaxmg::cuda::CudaError(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__),
                    error, error_size);
    }
  }
  return Report(jaxmg::mp::Version(device, stream, version), error, error_size);
}

// Joins the job-private channel of a job that runs one process per device:
// `token` names the job, `process_index` is this process's rank. Returns 0,
// or 1 with the reason in `error`.
int jaxmg_processes_open(const char* token, int process_index, char* error, size_t error_size) {
  return Report(jaxmg::processes::Open(token ? token : "", process_index), error, error_size);
}

// Participant i of call `call_id` runs in process processes[i].
void jaxmg_register_call(int64_t call_id, int32_t n, const int32_t* processes) {
  jaxmg::processes::RegisterCall(call_id, std::vector<int32_t>(processes, processes + n));
}

// Open channel sockets, requests waiting for a meeting, registered calls,
// failed meetings, peers lost without a goodbye: five int64s.
void jaxmg_processes_stats(int64_t* out) {
  const jaxmg::processes::Stats s = jaxmg::processes::GetStats();
  out[0] = s.connections;
  out[1] = s.pending;
  out[2] = s.calls;
  out[3] = s.failed;
  out[4] = s.lost;
}

}  // extern "C"
