// Plain C entry points the Python package calls through ctypes at import.
#include <cstdint>

#include "xla_ext/engines/lapack/lapack.h"
#include "xla_ext/rendezvous/rendezvous.h"

extern "C" {

// Hands one LAPACK routine (by name, e.g. "zheevd") to the CPU engine.
// Returns 1 if the name is one this library uses, 0 otherwise.
int jaxmg_register_lapack(const char* name, void* fn) {
  return jaxmg::lapack::Register(name, fn) ? 1 : 0;
}

int64_t jaxmg_live_meetings() { return jaxmg::rendezvous::LiveMeetings(); }

}  // extern "C"
