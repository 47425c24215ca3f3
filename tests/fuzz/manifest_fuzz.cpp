// Fuzz target: a checkpoint's manifest.json and the `latest` pointer file. The input is split at its
// first NUL byte: before it, <checkpoints>/step_00000010/manifest.json; after it, <checkpoints>/latest.
// The directory also holds a 4-byte model.safetensors, so verify_checkpoint checks sizes and hashes
// against whatever the manifest claims, and find_resume_checkpoint follows `latest`.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/latest_pointer.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const fs::path run = wick::fuzz::scratch_dir() / "run";
  const fs::path checkpoints = run / "checkpoints", step = checkpoints / "step_00000010";
  fs::create_directories(step);
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t manifest_bytes = nul ? static_cast<size_t>(nul - data) : size;
  wick::fuzz::write_input(data, manifest_bytes, "run/checkpoints/step_00000010/manifest.json");
  const uint8_t model[4] = {1, 2, 3, 4};
  wick::fuzz::write_input(model, sizeof model, "run/checkpoints/step_00000010/model.safetensors");
  fs::remove(checkpoints / "latest");
  if (nul) wick::fuzz::write_input(nul + 1, size - manifest_bytes - 1, "run/checkpoints/latest");

  wick::fuzz::expect_data_error([&] { wick::read_manifest(step); });
  wick::fuzz::expect_data_error([&] { wick::verify_checkpoint(step); });
  wick::fuzz::expect_data_error([&] { wick::read_latest(checkpoints); });
  wick::fuzz::expect_data_error([&] { wick::find_resume_checkpoint(run, "auto"); });
  return 0;
}
