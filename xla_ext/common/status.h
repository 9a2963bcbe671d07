// A small status type: internal code returns Status, and only the FFI layer
// turns it into an ffi::Error. No exception crosses a layer boundary.
#ifndef JAXMG_XLA_EXT_COMMON_STATUS_H_
#define JAXMG_XLA_EXT_COMMON_STATUS_H_

#include <sstream>
#include <string>
#include <utility>

namespace jaxmg {

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return message_.empty(); }
  const std::string& message() const { return message_; }

 private:
  explicit Status(std::string message)
      : message_(message.empty() ? "unknown error" : std::move(message)) {}
  std::string message_;
};

// Builds a message from streamable parts: Errorf("N=", n, " is too large").
template <typename... Parts>
Status Errorf(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return Status::Error(out.str());
}

}  // namespace jaxmg

#define JAXMG_RETURN_IF_ERROR(expr)        \
  do {                                     \
    ::jaxmg::Status jaxmg_status_ = (expr); \
    if (!jaxmg_status_.ok()) return jaxmg_status_; \
  } while (0)

#endif  // JAXMG_XLA_EXT_COMMON_STATUS_H_
