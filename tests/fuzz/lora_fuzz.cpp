// Fuzz target: a LoRA file (safetensors, kohya or PEFT naming) loaded into three small models: a Conv2d
// 3 -> 8 ("conv_in") and a Linear 8 -> 4 ("proj") with LoRA rank 2, alpha 16 on both (kohya LoCon), the
// same with a DoRA on proj only, and the Linear alone with a LoRA (PEFT files carry no convolution).
// Every shape, rank, alpha and name in the file is checked against them; a mismatch must be a Data error.
#include <cstdint>
#include <memory>
#include <string>

#include "engine/module.h"
#include "models/lora_files.h"
#include "models/nn/adapters.h"
#include "models/nn/conv.h"
#include "models/nn/linear.h"
#include "tests/fuzz/fuzz_input.h"

namespace {
class ConvAndLinear : public wick::Module {
 public:
  explicit ConvAndLinear(bool conv) {
    if (conv)
      register_module("conv_in", std::make_shared<wick::nn::Conv2d>(3, 8, 3, wick::nn::Conv2dOptions{.padding = 1}));
    register_module("proj", std::make_shared<wick::nn::Linear>(8, 4));
  }
};

std::shared_ptr<ConvAndLinear> make_model(bool conv, const char* type, const char* pattern) {
  auto model = std::make_shared<ConvAndLinear>(conv);
  wick::nn::apply_adapters(*model, {.type = type, .patterns = {pattern}, .options = {.rank = 2, .alpha = 16.0}});
  return model;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::shared_ptr<ConvAndLinear> models[] = {make_model(true, "lora", "*"),
                                                           make_model(true, "dora", "proj"),
                                                           make_model(false, "lora", "*")};
  const std::string path = wick::fuzz::write_input(data, size, "input_lora.safetensors");
  for (const auto& model : models) wick::fuzz::expect_data_error([&] { wick::load_lora(*model, path); });
  return 0;
}
