#include "xla_ext/engines/mp/engine.h"

#include "xla_ext/common/dtypes.h"
#include "xla_ext/vendor/cuda.h"

namespace jaxmg::mp {

template <typename T>
Status MpEngine<T>::CopyRhs(const engines::Part<T>& part) {
  if (part.b() == part.x()) return Status::Ok();
  JAXMG_CUDA(cuda::api().cudaMemcpyAsync(part.x(), part.b(), part.bytes(engines::kB),
                                         cudaMemcpyDeviceToDevice, stream_));
  return Status::Ok();
}

template <typename T>
Status MpEngine<T>::Potrf(const Call& call, const Parts& parts) {
  const auto& p = parts[0];
  return mp::Potrf<T>(rank_, grid_, stream_, call.n, call.tile, p.a(), p.info(), alloc_);
}

template <typename T>
Status MpEngine<T>::CholSolve(const Call& call, const Parts& parts) {
  const auto& p = parts[0];
  JAXMG_RETURN_IF_ERROR(CopyRhs(p));
  return mp::Potrs<T>(rank_, grid_, stream_, call.n, call.tile, p.a(), p.x(), call.k, alloc_);
}

template <typename T>
Status MpEngine<T>::Getrf(const Call& call, const Parts& parts) {
  const auto& p = parts[0];
  return mp::Getrf<T>(rank_, grid_, stream_, call.n, call.tile, p.a(), p.pivots(), p.info(),
                      alloc_);
}

template <typename T>
Status MpEngine<T>::LuSolve(const Call& call, const Parts& parts) {
  const auto& p = parts[0];
  JAXMG_RETURN_IF_ERROR(CopyRhs(p));
  return mp::Getrs<T>(rank_, grid_, stream_, call.n, call.tile, p.a(), p.pivots(), p.x(), call.k,
                      alloc_);
}

template <typename T>
Status MpEngine<T>::Syevd(const Call& call, const Parts& parts) {
  const auto& p = parts[0];
  return mp::Syevd<T>(rank_, grid_, stream_, call.n, call.tile, p.a(), p.q(), p.w(), p.info(),
                      alloc_);
}

template <typename T>
Status MpEngine<T>::Qr(const Call& call, const Parts& parts) {
  const auto& p = parts[0];
  return mp::Qr<T>(rank_, grid_, stream_, call.m, call.n, call.tile, p.a(), p.r(), p.info(),
                   alloc_);
}

#define JAXMG_INSTANTIATE(prefix, name, T, ...) template class MpEngine<T>;
JAXMG_FOR_EACH_DTYPE(JAXMG_INSTANTIATE)
#undef JAXMG_INSTANTIATE

}  // namespace jaxmg::mp
