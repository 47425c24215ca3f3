// Fuzz target: a latent dataset (HDF5, docs/dataset.md). Opens it (structure check), validates the
// content, and reads the first sample of every bucket. open first reads the file in a child process
// (engine/data/child_check.h), so a crash or hang inside libhdf5 must come back as a WickError; with
// WICK_DATASET_CHECK=0 the HDF5 library's own decoding is fuzzed in-process and its crashes are reported.
#include <cstdint>
#include <memory>
#include <string>

#include "engine/data/latent_dataset.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = wick::fuzz::write_input(data, size, "input.h5");
  wick::fuzz::expect_data_error([&] {
    std::shared_ptr<wick::LatentDataset> dataset = wick::LatentDataset::open(path);
    dataset->validate();
    for (int64_t id = 0; id < dataset->size() && id < 4096; ++id) {
      if (dataset->row_of(id) == 0) dataset->read({id});
    }
  });
  return 0;
}
