// Fuzz target: a .safetensors file (header length, JSON header, dtypes, shapes, data_offsets). Opens it,
// then reads every tensor (get and raw_bytes) and touches every byte, so an offset the validation let
// through that points outside the mapping is an AddressSanitizer report, not a silent read.
#include <cstdint>
#include <string>

#include "runtime/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = wick::fuzz::write_input(data, size, "input.safetensors");
  wick::fuzz::expect_data_error([&] {
    wick::SafetensorsFile file = wick::SafetensorsFile::open(path);
    uint64_t sum = 0;
    for (const std::string& name : file.names()) {
      const wick::SafetensorsInfo& info = file.info(name);
      wick::Tensor raw = file.raw_bytes(name);
      const auto* bytes = static_cast<const uint8_t*>(raw.data());
      for (int64_t i = 0; i < raw.numel(); ++i) sum += bytes[i];
      wick::Tensor tensor = file.get(name);
      if (info.wick_dtype && tensor.numel() != 0) sum += static_cast<const uint8_t*>(tensor.data())[0];
    }
    for (const auto& [key, value] : file.metadata()) sum += key.size() + value.size();
    if (sum == 0xdeadbeefcafeULL) std::abort();  // keeps the reads
  });
  return 0;
}
