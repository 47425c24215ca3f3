// Errors: one family of checking macros that throw typed exceptions carrying file:line.
//
//   WICK_CHECK(x.dim() == 2, "matmul: expected a 2-d tensor, got ", x.shape());
//   CUDA_CHECK(cudaMemcpyAsync(...));       // in runtime/cuda/*.cu
//   throw WickError(ErrorKind::BadInput, "safetensors: ", path, ": header length past end of file");
//
// Every message names the op and, where they matter, the shapes and dtypes involved.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace wick {

// Kinds map onto the command line's exit statuses (2 usage/config, 3 data, 4 training).
enum class ErrorKind {
  Usage,     // bad argument, shape or dtype passed by the caller
  Config,    // bad configuration file or command line
  Data,      // bad data, checkpoint or weights file
  Runtime,   // failure of a library call (CUDA, cuBLAS, MPI, ...) or of the machine
  Training,  // a failure during training (non-finite loss limit, lost peer)
};

class WickError : public std::runtime_error {
 public:
  WickError(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// The error's message without the " [file:line]" the checking macros append (for wrapping it in another).
std::string message_of(const WickError& error);

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
[[noreturn]] void throw_error(ErrorKind kind, const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace wick

#define WICK_CHECK(cond, ...)                                                                     \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      ::wick::detail::throw_error(::wick::ErrorKind::Usage, __FILE__, __LINE__,                   \
                                  ::wick::detail::concat(__VA_ARGS__));                           \
  } while (0)

#define WICK_CHECK_KIND(kind, cond, ...)                                                          \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      ::wick::detail::throw_error(::wick::ErrorKind::kind, __FILE__, __LINE__,                    \
                                  ::wick::detail::concat(__VA_ARGS__));                           \
  } while (0)

#define WICK_FAIL(kind, ...)                                                                      \
  ::wick::detail::throw_error(::wick::ErrorKind::kind, __FILE__, __LINE__,                        \
                              ::wick::detail::concat(__VA_ARGS__))
