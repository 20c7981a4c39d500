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

namespace paddle {
namespace ext_detail {
// PADDLE_ENFORCE_EQ(a, b, summary) compares; Paddle's sources also write PADDLE_ENFORCE_EQ(cond, summary),
// which checks cond alone.
template <typename Cmp, typename A, typename B>
void enforce(const char* file, int line, const char* text, const A& a, const B& b, const ErrorSummary& s) {
  if (!Cmp()(a, b)) fail(file, line, s.to_string() + " [expected " + text + "]");
}
template <typename Cmp, typename A>
void enforce(const char* file, int line, const char* text, const A& a, const ErrorSummary& s) {
  if (!a) fail(file, line, s.to_string() + " [expected " + text + "]");
}
struct Eq { template <typename A, typename B> bool operator()(const A& a, const B& b) const { return a == b; } };
struct Ne { template <typename A, typename B> bool operator()(const A& a, const B& b) const { return a != b; } };
struct Gt { template <typename A, typename B> bool operator()(const A& a, const B& b) const { return a > b; } };
struct Ge { template <typename A, typename B> bool operator()(const A& a, const B& b) const { return a >= b; } };
struct Lt { template <typename A, typename B> bool operator()(const A& a, const B& b) const { return a < b; } };
struct Le { template <typename A, typename B> bool operator()(const A& a, const B& b) const { return a <= b; } };
}  // namespace ext_detail
}  // namespace paddle

#define OARLOCK_ENFORCE(CMP, TEXT, ...) \
  ::paddle::ext_detail::enforce<::paddle::ext_detail::CMP>(__FILE__, __LINE__, TEXT, __VA_ARGS__)
#define PADDLE_ENFORCE_EQ(...) OARLOCK_ENFORCE(Eq, "EQ(" #__VA_ARGS__ ")", __VA_ARGS__)
#define PADDLE_ENFORCE_NE(...) OARLOCK_ENFORCE(Ne, "NE(" #__VA_ARGS__ ")", __VA_ARGS__)
#define PADDLE_ENFORCE_GT(...) OARLOCK_ENFORCE(Gt, "GT(" #__VA_ARGS__ ")", __VA_ARGS__)
#define PADDLE_ENFORCE_GE(...) OARLOCK_ENFORCE(Ge, "GE(" #__VA_ARGS__ ")", __VA_ARGS__)
#define PADDLE_ENFORCE_LT(...) OARLOCK_ENFORCE(Lt, "LT(" #__VA_ARGS__ ")", __VA_ARGS__)
#define PADDLE_ENFORCE_LE(...) OARLOCK_ENFORCE(Le, "LE(" #__VA_ARGS__ ")", __VA_ARGS__)
#define PADDLE_ENFORCE_NOT_NULL(P, SUMMARY) PADDLE_ENFORCE((P) != nullptr, SUMMARY)
