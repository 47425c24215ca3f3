#include "models/vae/wan_vae_blocks.h"

#include <cmath>

#include "engine/autograd/ops_conv.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_reduce.h"
#include "engine/init.h"
#include "models/nn/conv.h"
#include "models/vae/vae_blocks.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"

namespace wick::vae {
namespace {

// F.normalize's floor on the norm.
constexpr double kNormFloor = 1e-12;

// Named layers run by their owner (Wan's nn.Sequential indices: residual.{0, 2, 3, 6}, head.{0, 2},
// resample.1, middle.{0, 1, 2}, downsamples.N).
class WanLayers : public Module {
 public:
  explicit WanLayers(std::string type) : type_(std::move(type)) {}
  std::string type_name() const override { return type_; }
  template <typename M>
  void add(const std::string& name, std::shared_ptr<M> module) {
    register_module(name, std::move(module));
  }

 private:
  std::string type_;
};

std::shared_ptr<nn::Conv2d> conv2d(const WanVaeConfig& c, int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                   int64_t padding) {
  return std::make_shared<nn::Conv2d>(in, out, kernel,
                                      nn::Conv2dOptions{.stride = stride,
                                                        .padding = padding,
                                                        .dilation = 1,
                                                        .groups = 1,
                                                        .bias = true,
                                                        .dtype = c.dtype,
                                                        .device = c.device,
                                                        .trainable = false,
                                                        .initialize = c.initialize});
}

std::shared_ptr<WanCausalConv3d> causal(const WanVaeConfig& c, int64_t in, int64_t out, int64_t kernel) {
  return std::make_shared<WanCausalConv3d>(c, in, out, kernel, kernel, kernel / 2);
}

void run_children(const Module& layers, Tensor& h) {
  for (const auto& [name, layer] : layers.children()) h = layer->forward(h);
}

// norm, silu, conv: the head of the encoder and decoder.
Tensor run_head(const Module& head, const Tensor& x) {
  return head.child("2")->forward(autograd::silu(head.child("0")->forward(x)));
}

std::shared_ptr<WanLayers> make_middle(const WanVaeConfig& c, int64_t channels) {
  auto middle = std::make_shared<WanLayers>("WanMiddle");
  middle->add("0", std::make_shared<WanResidualBlock>(c, channels, channels));
  middle->add("1", std::make_shared<WanAttentionBlock>(c, channels));
  middle->add("2", std::make_shared<WanResidualBlock>(c, channels, channels));
  return middle;
}

std::shared_ptr<WanLayers> make_head(const WanVaeConfig& c, int64_t channels, int64_t out) {
  auto head = std::make_shared<WanLayers>("WanHead");
  head->add("0", std::make_shared<WanRmsNorm>(c, channels));
  head->add("2", causal(c, channels, out, 3));
  return head;
}

void check_input(const Tensor& x, int64_t channels, const char* what) {
  WICK_CHECK(x.dim() == 4 && x.size(1) == channels && x.size(0) > 0 && x.size(2) > 0 && x.size(3) > 0, what,
             ": expected [B, ", channels, ", H, W], got ", x.describe());
}

}  // namespace

WanCausalConv3d::WanCausalConv3d(const WanVaeConfig& c, int64_t in, int64_t out, int64_t kernel_t, int64_t kernel_hw,
                                 int64_t padding_hw)
    : padding_(padding_hw) {
  const int64_t fan_in = in * kernel_t * kernel_hw * kernel_hw;
  auto make = [&](const Shape& shape) {
    return c.initialize ? init_fan_in_uniform(shape, fan_in, c.dtype, c.device)
                        : Tensor::empty(shape, c.dtype, c.device);
  };
  register_parameter("weight", &weight_, make({out, in, kernel_t, kernel_hw, kernel_hw}), false);
  register_parameter("bias", &bias_, make({out}), false);
}

Tensor WanCausalConv3d::forward(const Tensor& x) {
  // Zero frames in front of the first one: only the last temporal tap meets data.
  Tensor last_tap = autograd::contiguous(autograd::select(weight_, 2, weight_.size(2) - 1));
  return autograd::conv2d(x, last_tap, bias_, {1, 1}, {padding_, padding_});
}

WanRmsNorm::WanRmsNorm(const WanVaeConfig& c, int64_t channels, bool image_gamma) {
  const Shape shape = image_gamma ? Shape{channels, 1, 1} : Shape{channels, 1, 1, 1};
  register_parameter("gamma", &gamma_,
                     c.initialize ? ones(shape, c.dtype, c.device) : Tensor::empty(shape, c.dtype, c.device), false);
}

Tensor WanRmsNorm::forward(const Tensor& x) {
  WICK_CHECK(x.dim() == 4 && x.size(1) == gamma_.size(0), "WanRmsNorm: expected [B, ", gamma_.size(0), ", H, W], got ",
             x.describe());
  const DType math = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor xf = autograd::to_dtype(x, math);
  Tensor norm =
      autograd::maximum(autograd::sqrt(autograd::sum(autograd::square(xf), {1}, /*keepdim=*/true)), kNormFloor);
  Tensor normalized = autograd::to_dtype(xf / norm, x.dtype());
  const int64_t channels = gamma_.size(0);
  return normalized * std::sqrt(static_cast<double>(channels)) * autograd::reshape(gamma_, {channels, 1, 1});
}

WanResidualBlock::WanResidualBlock(const WanVaeConfig& c, int64_t in, int64_t out) {
  auto residual = std::make_shared<WanLayers>("WanResidual");
  residual->add("0", std::make_shared<WanRmsNorm>(c, in));
  residual->add("2", causal(c, in, out, 3));
  residual->add("3", std::make_shared<WanRmsNorm>(c, out));
  residual->add("6", causal(c, out, out, 3));
  register_module("residual", residual);
  if (in != out) register_module("shortcut", causal(c, in, out, 1));
}

Tensor WanResidualBlock::forward(const Tensor& x) {
  const Module& r = *child("residual");
  Tensor h = autograd::silu(r.child("0")->forward(x));
  h = r.child("2")->forward(h);
  h = autograd::silu(r.child("3")->forward(h));
  h = r.child("6")->forward(h);
  if (auto shortcut = child("shortcut")) return shortcut->forward(x) + h;
  return x + h;
}

WanAttentionBlock::WanAttentionBlock(const WanVaeConfig& c, int64_t channels) {
  register_module("norm", std::make_shared<WanRmsNorm>(c, channels, /*image_gamma=*/true));
  register_module("to_qkv", conv2d(c, channels, 3 * channels, 1, 1, 0));
  register_module("proj", conv2d(c, channels, channels, 1, 1, 0));
}

Tensor WanAttentionBlock::forward(const Tensor& x) {
  const int64_t channels = x.size(1);
  Tensor qkv = child("to_qkv")->forward(child("norm")->forward(x));
  Tensor attended =
      spatial_attention(autograd::narrow(qkv, 1, 0, channels), autograd::narrow(qkv, 1, channels, channels),
                        autograd::narrow(qkv, 1, 2 * channels, channels));
  qkv = Tensor();
  return x + child("proj")->forward(attended);
}

WanResample::WanResample(const WanVaeConfig& c, int64_t channels, WanResampleMode mode) : mode_(mode) {
  const bool down = mode == WanResampleMode::Downsample2d || mode == WanResampleMode::Downsample3d;
  auto resample = std::make_shared<WanLayers>("WanResampleConv");
  resample->add("1", down ? conv2d(c, channels, channels, 3, 2, 0) : conv2d(c, channels, channels / 2, 3, 1, 1));
  register_module("resample", resample);
  if (mode == WanResampleMode::Downsample3d)
    register_module("time_conv", std::make_shared<WanCausalConv3d>(c, channels, channels, 3, 1, 0));
  if (mode == WanResampleMode::Upsample3d)
    register_module("time_conv", std::make_shared<WanCausalConv3d>(c, channels, 2 * channels, 3, 1, 0));
}

Tensor WanResample::forward(const Tensor& x) {
  Module& conv = *child("resample")->child("1");
  if (mode_ == WanResampleMode::Downsample2d || mode_ == WanResampleMode::Downsample3d)
    return conv.forward(autograd::pad(x, {0, 1, 0, 1}));
  return conv.forward(upsample_nearest2x(x));  // nearest-exact equals nearest at scale 2
}

WanEncoder::WanEncoder(const WanVaeConfig& c) {
  const int64_t n = c.n_levels();
  register_module("conv1", causal(c, c.in_channels, c.base_dim, 3));
  auto downsamples = std::make_shared<WanLayers>("WanDownsamples");
  int64_t index = 0, in = c.base_dim;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t out = c.channels(i);
    for (int64_t j = 0; j < c.num_res_blocks; ++j, in = out)
      downsamples->add(std::to_string(index++), std::make_shared<WanResidualBlock>(c, in, out));
    if (i + 1 < n)
      downsamples->add(std::to_string(index++),
                       std::make_shared<WanResample>(c, out,
                                                     c.temporal_downsample[static_cast<size_t>(i)]
                                                         ? WanResampleMode::Downsample3d
                                                         : WanResampleMode::Downsample2d));
  }
  register_module("downsamples", downsamples);
  register_module("middle", make_middle(c, in));
  register_module("head", make_head(c, in, 2 * c.z_dim));
  set_all_trainable(false);
  eval();
}

Tensor WanEncoder::forward(const Tensor& frames) {
  check_input(frames, child("conv1")->parameter("weight").size(1), "Wan VAE encoder");
  Tensor h = child("conv1")->forward(frames);
  run_children(*child("downsamples"), h);
  run_children(*child("middle"), h);
  return run_head(*child("head"), h);
}

WanDecoder::WanDecoder(const WanVaeConfig& c) {
  const int64_t n = c.n_levels();
  register_module("conv1", causal(c, c.z_dim, c.channels(n - 1), 3));
  register_module("middle", make_middle(c, c.channels(n - 1)));
  auto upsamples = std::make_shared<WanLayers>("WanUpsamples");
  int64_t index = 0, in = c.channels(n - 1);
  for (int64_t i = 0; i < n; ++i) {  // coarsest level first
    const int64_t out = c.channels(n - 1 - i);
    if (i > 0) in /= 2;  // the previous upsampler halved the channels
    for (int64_t j = 0; j <= c.num_res_blocks; ++j, in = out)
      upsamples->add(std::to_string(index++), std::make_shared<WanResidualBlock>(c, in, out));
    if (i + 1 < n)
      upsamples->add(std::to_string(index++),
                     std::make_shared<WanResample>(c, out,
                                                   c.temporal_downsample[static_cast<size_t>(n - 2 - i)]
                                                       ? WanResampleMode::Upsample3d
                                                       : WanResampleMode::Upsample2d));
  }
  register_module("upsamples", upsamples);
  register_module("head", make_head(c, in, c.in_channels));
  set_all_trainable(false);
  eval();
}

Tensor WanDecoder::forward(const Tensor& z) {
  check_input(z, child("conv1")->parameter("weight").size(1), "Wan VAE decoder");
  Tensor h = child("conv1")->forward(z);
  run_children(*child("middle"), h);
  run_children(*child("upsamples"), h);
  return run_head(*child("head"), h);
}

}  // namespace wick::vae
