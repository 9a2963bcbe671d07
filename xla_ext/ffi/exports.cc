// Plain C entry points the Python package calls through ctypes at import.
#include <cstdint>

#include "xla_ext/engines/lapack/lapack.h"
#include "xla_ext/rendezvous/processes.h"
#include "xla_ext/rendezvous/rendezvous.h"
#include "xla_ext/vendor/cuda.h"

#include <cstring>
#include <vector>

extern "C" {

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
  jaxmg::Status s = jaxmg::cuda::Load(search_path ? search_path : "");
  if (s.ok()) return 0;
  if (error_size > 0) {
    std::strncpy(error, s.message().c_str(), error_size - 1);
    error[error_size - 1] = '\0';
  }
  return 1;
}

// Joins the job-private channel of a job that runs one process per device:
// `token` names the job, `process_index` is this process's rank. Returns 0,
// or 1 with the reason in `error`.
int jaxmg_processes_open(const char* token, int process_index, char* error, size_t error_size) {
  jaxmg::Status s = jaxmg::processes::Open(token ? token : "", process_index);
  if (s.ok()) return 0;
  if (error_size > 0) {
    std::strncpy(error, s.message().c_str(), error_size - 1);
    error[error_size - 1] = '\0';
  }
  return 1;
}

// Participant i of call `call_id` runs in process processes[i].
void jaxmg_register_call(int64_t call_id, int32_t n, const int32_t* processes) {
  jaxmg::processes::RegisterCall(call_id, std::vector<int32_t>(processes, processes + n));
}

// Open channel sockets, requests waiting for a meeting, registered calls.
void jaxmg_processes_stats(int64_t* out) {
  const jaxmg::processes::Stats s = jaxmg::processes::GetStats();
  out[0] = s.connections;
  out[1] = s.pending;
  out[2] = s.calls;
}

}  // extern "C"
