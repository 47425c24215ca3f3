// Gradient-check entries for the adapters (models/nn/lora.h, models/nn/lora_conv.h): each case builds
// the adapter around a fresh base layer of the input's dtype and device and puts the case's inputs in
// its parameter slots, so the table checks the module's whole forward and backward.
//
// Output-axis DoRA: its norm ||W + s·up@down||_row is detached (PEFT's and the paper's rule), so the
// gradients of down and up are not the derivative of the forward and finite differences cannot check
// them; here x and the magnitude are checked (the norm does not depend on them), and down/up are
// constants. tests/models/adapters_test.cpp checks all four against PEFT's own layer.
#include <memory>

#include "models/nn/lora.h"
#include "models/nn/lora_conv.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

GradInput constant(Shape shape) { return {.shape = std::move(shape), .differentiable = false}; }

// x [N, in, H, W], weight [out, in, k, k] and bias (constants), down [r, in, k, k], up [out, r, 1, 1].
GradCase lora_conv_case(std::string name, Shape x, int64_t out, int64_t k, int64_t rank, nn::Conv2dOptions conv) {
  const int64_t in = x[1];
  GradCase c;
  c.name = std::move(name);
  c.inputs = {{.shape = std::move(x)}, constant({out, in, k, k}), constant({out}), {.shape = {rank, in, k, k}},
              {.shape = {out, rank, 1, 1}}};
  c.fn = [=](const Inputs& v) {
    nn::Conv2dOptions options = conv;
    options.dtype = v[0].dtype();
    options.device = v[0].device();
    auto lora = std::make_shared<nn::LoRAConv2d>(std::make_shared<nn::Conv2d>(in, out, k, options),
                                                 nn::AdapterOptions{.rank = rank, .alpha = 3.0});
    lora->base().weight_ = v[1];
    lora->base().bias_ = v[2];
    lora->down_weight() = v[3];
    lora->up_weight() = v[4];
    return Outputs{lora->forward(v[0])};
  };
  return c;
}

// x [..., in]; weight [out, in], bias [out], down [r, in], up [out, r] (constants); magnitude [out].
GradCase dora_output_case(std::string name, Shape x, int64_t out, int64_t rank) {
  const int64_t in = x.back();
  GradCase c;
  c.name = std::move(name);
  c.inputs = {{.shape = std::move(x)}, constant({out, in}), constant({out}), constant({rank, in}),
              constant({out, rank}), {.shape = {out}, .low = 0.5, .high = 1.5}};
  c.fn = [=](const Inputs& v) {
    auto base = std::make_shared<nn::Linear>(in, out, nn::LinearOptions{.dtype = v[0].dtype(), .device = v[0].device()});
    auto dora = std::make_shared<nn::DoRALinear>(
        base, nn::AdapterOptions{.rank = rank, .alpha = 3.0, .dora_axis = nn::DoraAxis::Output});
    base->weight_ = v[1];
    base->bias_ = v[2];
    dora->down_weight() = v[3];
    dora->up_weight() = v[4];
    dora->magnitude_ = v[5];
    return Outputs{dora->forward(v[0])};
  };
  return c;
}

std::vector<GradCase> adapter_grad_cases() {
  return {
      lora_conv_case("LoRAConv2d_3x3_padding1", {2, 3, 5, 6}, 4, 3, 2, {.padding = 1}),
      lora_conv_case("LoRAConv2d_3x3_stride2", {1, 3, 7, 6}, 5, 3, 2, {.stride = 2, .padding = 1}),
      lora_conv_case("LoRAConv2d_3x3_dilation2", {1, 2, 8, 7}, 3, 3, 2, {.padding = 2, .dilation = 2}),
      lora_conv_case("LoRAConv2d_1x1", {2, 4, 3, 3}, 5, 1, 3, {}),
      dora_output_case("DoRALinear_output_axis", {3, 5}, 4, 2),
      dora_output_case("DoRALinear_output_axis_3d_input", {2, 3, 6}, 5, 3),
  };
}
WICK_REGISTER_GRAD_CASES(adapter_grad_cases);

}  // namespace
}  // namespace wick::testing
