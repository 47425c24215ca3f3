// Writes the datasets the `wick train` command-line tests use into DIR: synthetic.h5 (96 samples of
// three classes, latents 4x8x8) and nan.h5 (the same kind, a NaN in sample 5).
//   train_fixture DIR
#include <cstdio>
#include <filesystem>
#include <string>

#include "runtime/error.h"
#include "tests/train/synthetic_dataset.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::string dir = argv[1];
    std::filesystem::create_directories(dir);
    wick::testing::write_synthetic_dataset(dir + "/synthetic.h5", {.n_samples = 96});
    wick::testing::write_synthetic_dataset(dir + "/nan.h5", {.n_samples = 32, .nan_sample = 5});
  } catch (const wick::WickError& error) {
    std::fprintf(stderr, "train_fixture: %s\n", error.what());
    return 1;
  }
  return 0;
}
