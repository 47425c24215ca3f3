// Fuzz target: an IDX file (MNIST format), plain or gzipped. The first input byte picks the form: odd
// = the rest is written as a .gz file (a gzip stream; the corpus holds gzipped seeds), even = plain.
// A header that claims more elements than the file holds must be refused before anything is allocated.
#include <cstdint>
#include <string>

#include "engine/data/idx.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool gzipped = data[0] & 1;
  const std::string path = wick::fuzz::write_input(data + 1, size - 1, gzipped ? "input.idx.gz" : "input.idx");
  wick::fuzz::expect_data_error([&] {
    wick::Tensor tensor = wick::read_idx(path);
    if (tensor.numel() > static_cast<int64_t>(size)) std::abort();  // more elements than input bytes
  });
  return 0;
}
