#include "xla_ext/engines/lapack/lapack.h"

#include <cstring>

namespace jaxmg::lapack {
namespace {

template <typename T>
bool RegisterFor(const char* prefix, const char* evd_name, const char* name, void* fn) {
  const size_t len = std::strlen(prefix);
  if (std::strncmp(name, prefix, len) != 0) return false;
  const char* routine = name + len;
  if (std::strcmp(routine, "potrf") == 0) {
    Api<T>::potrf = reinterpret_cast<typename Api<T>::Potrf*>(fn);
  } else if (std::strcmp(routine, "potrs") == 0) {
    Api<T>::potrs = reinterpret_cast<typename Api<T>::Potrs*>(fn);
  } else if (std::strcmp(routine, "potri") == 0) {
    Api<T>::potri = reinterpret_cast<typename Api<T>::Potri*>(fn);
  } else if (std::strcmp(routine, "getrf") == 0) {
    Api<T>::getrf = reinterpret_cast<typename Api<T>::Getrf*>(fn);
  } else if (std::strcmp(routine, "getrs") == 0) {
    Api<T>::getrs = reinterpret_cast<typename Api<T>::Getrs*>(fn);
  } else if (std::strcmp(routine, evd_name) == 0) {
    Api<T>::evd = reinterpret_cast<typename Api<T>::Evd*>(fn);
  } else {
    return false;
  }
  return true;
}

}  // namespace

bool Register(const char* name, void* fn) {
  return RegisterFor<float>("s", "syevd", name, fn) ||
         RegisterFor<double>("d", "syevd", name, fn) ||
         RegisterFor<std::complex<float>>("c", "heevd", name, fn) ||
         RegisterFor<std::complex<double>>("z", "heevd", name, fn);
}

}  // namespace jaxmg::lapack
