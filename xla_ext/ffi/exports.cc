// Plain C entry points the Python package calls through ctypes at import.
#include <cstdint>

#include "xla_ext/engines/lapack/lapack.h"
#include "xla_ext/rendezvous/rendezvous.h"
#include "xla_ext/vendor/cuda.h"

#include <cstring>

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

}  // extern "C"
