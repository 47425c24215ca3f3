// Fuzz target: a latent dataset (HDF5, docs/dataset.md). Opens it (structure check), validates the
// content, and reads the first sample of every bucket. The HDF5 library's own format decoding is
// exercised too; a crash inside libhdf5 is reported like one in wick.
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
