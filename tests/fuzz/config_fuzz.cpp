// Fuzz target: a training config (YAML). A config that parses must also survive its own round trip:
// parse_config_string(to_yaml(c)) == c (the promise of train_config.h); a mismatch aborts.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/config/train_config.h"
#include "models/registry.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  wick::fuzz::expect_data_error([&] {
    std::vector<std::string> notes, warnings;
    wick::TrainConfig config = wick::parse_config_string(text, "<fuzz>", wick::config_schema(), {}, &notes, &warnings);
    wick::TrainConfig again = wick::parse_config_string(wick::to_yaml(config), "<fuzz:to_yaml>", wick::config_schema());
    if (!(again == config)) std::abort();
  });
  return 0;
}
