#include "runtime/error.h"

#include <cstring>

namespace wick {

std::string message_of(const WickError& error) {
  std::string text = error.what();
  if (!text.empty() && text.back() == ']') {
    const size_t open = text.rfind(" [");
    if (open != std::string::npos) text.erase(open);
  }
  return text;
}

}  // namespace wick

namespace wick::detail {

[[noreturn]] void throw_error(ErrorKind kind, const char* file, int line, const std::string& message) {
  // Keep the path short: from the last "wick/" or the repository-relative folder onward.
  const char* short_file = file;
  for (const char* folder : {"runtime/", "engine/", "comm/", "models/", "launch/", "tests/", "bench/"}) {
    if (const char* at = std::strstr(file, folder)) {
      short_file = at;
      break;
    }
  }
  throw WickError(kind, message + " [" + short_file + ":" + std::to_string(line) + "]");
}

}  // namespace wick::detail
