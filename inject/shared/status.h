// Errors as values for gprof-run's own parts (bpf/, collector/, cli/): a function that can fail
// returns a Status or an Expected<T>, with a code its callers branch on and one line for the
// user; nothing throws across a module boundary. It is here because inject/ is the one folder
// every part may include (docs/architecture.md). The injected library itself does not use it:
// inside the target program it must not allocate, so its errors stay errno values.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace gprof {

enum class StatusCode : uint8_t {
  kOk,
  kPermissionDenied,  // missing privileges: the caller can say which would do
  kNotFound,          // no such file, directory, command or process
  kInvalid,           // what was given cannot be used: an option, a malformed or corrupt file
  kUnsupported,       // what this kernel or build cannot do: no BTF, a newer file format
  kOutOfMemory,
  kIo,  // the system refused otherwise: a read, a write, a fork, a map update
};

class Status {
 public:
  Status() = default;  // OK
  static Status Error(StatusCode code, std::string message) {
    return Status(code, std::move(message));
  }
  // A system call's failure: the code errno `error` stands for, and `message`, which already
  // says the error in its own words.
  static Status FromErrno(int error, std::string message) {
    return Status(CodeOfErrno(error), std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static StatusCode CodeOfErrno(int error) {
    switch (error) {
      case EPERM:
      case EACCES:
        return StatusCode::kPermissionDenied;
      case ENOENT:
      case ESRCH:
        return StatusCode::kNotFound;
      case ENOMEM:
        return StatusCode::kOutOfMemory;
      case ENOSYS:
      case EOPNOTSUPP:
        return StatusCode::kUnsupported;
      default:
        return StatusCode::kIo;
    }
  }
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
class Expected {
 public:
  Expected(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design, like std::expected
  Expected(Status error) : state_(std::move(error)) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const { return std::get<Status>(state_); }
  T& value() { return std::get<T>(state_); }
  const T& value() const { return std::get<T>(state_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace gprof
