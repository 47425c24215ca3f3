// Shared by the fuzz targets: the parsers take paths, so each input is written to a scratch file first
// and read back through the same entry point a user's file takes.
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     std::string path = wick::fuzz::write_input(data, size, "x.safetensors");
//     wick::fuzz::expect_data_error([&] { wick::SafetensorsFile::open(path); });
//     return 0;
//   }
//
// A WickError is the expected answer to a hostile file; any other exception escapes and ends the run
// (libFuzzer reports it as a crash, the replay driver as a failure naming the input).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/error.h"

namespace wick::fuzz {

// A folder of this process's own (on /dev/shm when there is one: the targets write every input),
// removed at exit.
inline const std::filesystem::path& scratch_dir() {
  namespace fs = std::filesystem;
  struct Scratch {
    fs::path dir;
    ~Scratch() {
      std::error_code error;
      fs::remove_all(dir, error);
    }
  };
  static const Scratch scratch{[] {
    fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path d = base / ("wick-fuzz-" + std::to_string(getpid()));
    fs::create_directories(d);
    return d;
  }()};
  return scratch.dir;
}

// Writes data[0, size) to <scratch>/<name> (replacing it) and returns the path.
inline std::string write_input(const uint8_t* data, size_t size, const std::string& name) {
  std::filesystem::path path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path.string();
}

// Runs `parse`; a WickError (the parser refusing the file) is swallowed (printed when WICK_FUZZ_VERBOSE
// is set), anything else propagates.
template <typename F>
void expect_data_error(F&& parse) {
  try {
    parse();
  } catch (const WickError& e) {
    static const bool verbose = std::getenv("WICK_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "WickError: %s\n", e.what());
  }
}

}  // namespace wick::fuzz
