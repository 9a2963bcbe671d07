#include "xla_ext/engines/engine.h"

#include <complex>

#include "xla_ext/common/dtypes.h"

namespace jaxmg::engines {

const char* RoutineName(Routine routine) {
  switch (routine) {
#define JAXMG_ROUTINE_NAME(e, name) \
  case Routine::e:                  \
    return #name;
    JAXMG_FOR_EACH_ROUTINE(JAXMG_ROUTINE_NAME)
#undef JAXMG_ROUTINE_NAME
  }
  return "unknown";
}

template <typename T>
Status Engine<T>::Unsupported(Routine routine) const {
  return Errorf("jaxmg: the ", name(), " engine has no ", RoutineName(routine), " routine");
}

template <typename T>
Status Engine<T>::WorkspaceBytes(const Call&, int, void*, size_t* bytes) {
  *bytes = 0;
  return Status::Ok();
}

#define JAXMG_UNSUPPORTED_BY_DEFAULT(e, Method)                        \
  template <typename T>                                                \
  Status Engine<T>::Method(const Call&, const Parts<T>&) {             \
    return Unsupported(Routine::e);                                    \
  }
JAXMG_UNSUPPORTED_BY_DEFAULT(kPotrs, Potrs)
JAXMG_UNSUPPORTED_BY_DEFAULT(kPotrf, Potrf)
JAXMG_UNSUPPORTED_BY_DEFAULT(kCholSolve, CholSolve)
JAXMG_UNSUPPORTED_BY_DEFAULT(kGetrf, Getrf)
JAXMG_UNSUPPORTED_BY_DEFAULT(kLuSolve, LuSolve)
JAXMG_UNSUPPORTED_BY_DEFAULT(kPotri, Potri)
JAXMG_UNSUPPORTED_BY_DEFAULT(kSyevd, Syevd)
JAXMG_UNSUPPORTED_BY_DEFAULT(kQr, Qr)
JAXMG_UNSUPPORTED_BY_DEFAULT(kIrsGesv, IrsGesv)
JAXMG_UNSUPPORTED_BY_DEFAULT(kRelayout, Relayout)
#undef JAXMG_UNSUPPORTED_BY_DEFAULT

template <typename T>
Status Engine<T>::AllFinite(const Call&, const Parts<T>&, bool* finite) {
  *finite = true;
  return Status::Ok();
}

template <typename T>
Status Engine<T>::ReportNonFinite(const Call&, const Parts<T>&) {
  return Status::Ok();
}

bool ReadsUpperTriangle(Routine r) {
  return r == Routine::kPotrs || r == Routine::kPotrf || r == Routine::kPotri ||
         r == Routine::kSyevd;
}

namespace {

bool ReadsMatrix(Routine r) {
  return r == Routine::kPotrs || r == Routine::kPotrf || r == Routine::kGetrf ||
         r == Routine::kPotri || r == Routine::kSyevd;
}

template <typename T>
Status Dispatch(Engine<T>& engine, const Call& call, const Parts<T>& parts) {
  switch (call.routine) {
    case Routine::kPotrs: return engine.Potrs(call, parts);
    case Routine::kPotrf: return engine.Potrf(call, parts);
    case Routine::kCholSolve: return engine.CholSolve(call, parts);
    case Routine::kGetrf: return engine.Getrf(call, parts);
    case Routine::kLuSolve: return engine.LuSolve(call, parts);
    case Routine::kPotri: return engine.Potri(call, parts);
    case Routine::kSyevd: return engine.Syevd(call, parts);
    case Routine::kQr: return engine.Qr(call, parts);
    case Routine::kIrsGesv: return engine.IrsGesv(call, parts);
    case Routine::kRelayout: return engine.Relayout(call, parts);
  }
  return Errorf("jaxmg: unknown routine ", static_cast<int>(call.routine));
}

}  // namespace

template <typename T>
Status Run(Engine<T>& engine, const Call& call, const Parts<T>& parts) {
  bool finite = true;
  if (ReadsMatrix(call.routine)) JAXMG_RETURN_IF_ERROR(engine.AllFinite(call, parts, &finite));
  JAXMG_RETURN_IF_ERROR(Dispatch(engine, call, parts));
  return finite ? Status::Ok() : engine.ReportNonFinite(call, parts);
}

#define JAXMG_INSTANTIATE(prefix, name, T, ...) \
  template class Engine<T>;          \
  template Status Run<T>(Engine<T>&, const Call&, const Parts<T>&);
JAXMG_FOR_EACH_DTYPE(JAXMG_INSTANTIATE)
#undef JAXMG_INSTANTIATE

}  // namespace jaxmg::engines
