// Errors raised from custom operators: PD_THROW, PD_CHECK and Paddle's PADDLE_ENFORCE_* with phi::errors /
// common::errors summaries. Each throws std::runtime_error; the C ABI turns it into a Python RuntimeError
// naming the operator.
#pragma once

#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace paddle {
namespace ext_detail {

inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  append(os, args...);
  return os.str();
}

// printf-style formatting as Paddle's error summaries take it; std::string arguments become C strings
inline const char* printf_arg(const std::string& s) { return s.c_str(); }
template <typename T>
T printf_arg(const T& v) { return v; }

template <typename... Args>
std::string format(const char* fmt, const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    return std::string(fmt);
  } else {
    int n = std::snprintf(nullptr, 0, fmt, printf_arg(args)...);
    if (n < 0) return std::string(fmt);
    std::string out(static_cast<size_t>(n) + 1, '\0');
    std::snprintf(&out[0], out.size(), fmt, printf_arg(args)...);
    out.resize(static_cast<size_t>(n));
    return out;
  }
}

[[noreturn]] inline void fail(const char* file, int line, const std::string& message) {
  throw std::runtime_error(concat(message, " (at ", file, ":", line, ")"));
}

}  // namespace ext_detail

struct ErrorSummary {
  std::string kind, message;
  std::string to_string() const { return kind + ": " + message; }
};

}  // namespace paddle

#define OARLOCK_DEFINE_ERROR_KIND(KIND)                                          \
  template <typename... Args>                                                    \
  ::paddle::ErrorSummary KIND(const char* fmt, const Args&... args) {            \
    return ::paddle::ErrorSummary{#KIND, ::paddle::ext_detail::format(fmt, args...)}; \
  }

namespace phi {
namespace errors {
OARLOCK_DEFINE_ERROR_KIND(InvalidArgument)
OARLOCK_DEFINE_ERROR_KIND(NotFound)
OARLOCK_DEFINE_ERROR_KIND(OutOfRange)
OARLOCK_DEFINE_ERROR_KIND(AlreadyExists)
OARLOCK_DEFINE_ERROR_KIND(ResourceExhausted)
OARLOCK_DEFINE_ERROR_KIND(PreconditionNotMet)
OARLOCK_DEFINE_ERROR_KIND(PermissionDenied)
OARLOCK_DEFINE_ERROR_KIND(ExecutionTimeout)
OARLOCK_DEFINE_ERROR_KIND(Unimplemented)
OARLOCK_DEFINE_ERROR_KIND(Unavailable)
OARLOCK_DEFINE_ERROR_KIND(Fatal)
OARLOCK_DEFINE_ERROR_KIND(External)
}  // namespace errors
}  // namespace phi

namespace common {
namespace errors = ::phi::errors;
}

#define PD_THROW(...) ::paddle::ext_detail::fail(__FILE__, __LINE__, ::paddle::ext_detail::concat(__VA_ARGS__))

#define PD_CHECK(COND, ...)                                                              \
  do {                                                                                   \
    if (!(COND)) PD_THROW("Expected " #COND ", but it is not satisfied. ", ##__VA_ARGS__); \
  } while (0)

#define PADDLE_ENFORCE(COND, SUMMARY)                                                   \
  do {                                                                                  \
    if (!(COND)) PD_THROW((SUMMARY).to_string(), " [expected " #COND "]");              \
  } while (0)

#define OARLOCK_ENFORCE_CMP(A, B, OP, SUMMARY)                                          \
  do {                                                                                  \
    if (!((A)OP(B))) PD_THROW((SUMMARY).to_string(), " [expected " #A " " #OP " " #B "]"); \
  } while (0)

#define PADDLE_ENFORCE_EQ(A, B, SUMMARY) OARLOCK_ENFORCE_CMP(A, B, ==, SUMMARY)
#define PADDLE_ENFORCE_NE(A, B, SUMMARY) OARLOCK_ENFORCE_CMP(A, B, !=, SUMMARY)
#define PADDLE_ENFORCE_GT(A, B, SUMMARY) OARLOCK_ENFORCE_CMP(A, B, >, SUMMARY)
#define PADDLE_ENFORCE_GE(A, B, SUMMARY) OARLOCK_ENFORCE_CMP(A, B, >=, SUMMARY)
#define PADDLE_ENFORCE_LT(A, B, SUMMARY) OARLOCK_ENFORCE_CMP(A, B, <, SUMMARY)
#define PADDLE_ENFORCE_LE(A, B, SUMMARY) OARLOCK_ENFORCE_CMP(A, B, <=, SUMMARY)
#define PADDLE_ENFORCE_NOT_NULL(P, SUMMARY) OARLOCK_ENFORCE_CMP(P, nullptr, !=, SUMMARY)
