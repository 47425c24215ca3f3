#include "models/vae/vae_blocks.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_matmul.h"
#include "engine/autograd/ops_softmax.h"
#include "models/nn/basic.h"
#include "models/nn/conv.h"
#include "models/nn/norm.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"

namespace wick::vae {
namespace {

// The f32 scores of one attention chunk stay within this many bytes when the chunk is automatic.
constexpr int64_t kAttentionScoreBytes = int64_t{64} << 20;

std::shared_ptr<nn::Conv2d> conv(const VaeConfig& c, int64_t in, int64_t out, int64_t kernel, int64_t stride = 1,
                                 int64_t padding = 0) {
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

std::shared_ptr<nn::GroupNorm> group_norm(const VaeConfig& c, int64_t channels) {
  return std::make_shared<nn::GroupNorm>(c.norm_groups, channels, c.norm_eps, /*affine=*/true, c.dtype, c.device);
}

// One resolution level: children "block" (the ResBlocks, in order) and "downsample" or "upsample"
// (absent on the coarsest encoder level and on decoder level 0). The encoder and decoder run its
// layers themselves (run_level), so that no caller keeps a level's input alive past its first block.
class VaeLevel : public Module {
 public:
  explicit VaeLevel(std::string type = "VaeLevel") : type_(std::move(type)) {}
  std::string type_name() const override { return type_; }
  template <typename M>
  void add(const std::string& name, std::shared_ptr<M> module) {
    register_module(name, std::move(module));
  }

 private:
  std::string type_;
};

// h <- each ResBlock of `level`, then its sampler; every input is released when the next layer's
// output exists (vae_memory.cpp counts the bytes in this order).
void run_level(const Module& level, Tensor& h) {
  for (const auto& [name, block] : level.child("block")->children()) h = block->forward(h);
  for (const char* sampler : {"downsample", "upsample"})
    if (auto module = level.child(sampler)) h = module->forward(h);
}

std::shared_ptr<VaeLevel> make_level(const VaeConfig& c, int64_t in, int64_t out, int64_t n_blocks,
                                     const char* sampler) {
  auto level = std::make_shared<VaeLevel>();
  auto blocks = std::make_shared<nn::Sequential>();
  for (int64_t j = 0; j < n_blocks; ++j) blocks->add(std::make_shared<VaeResnetBlock>(c, j == 0 ? in : out, out));
  level->add("block", blocks);
  if (std::string(sampler) == "downsample") level->add("downsample", std::make_shared<VaeDownsample>(c, out));
  if (std::string(sampler) == "upsample") level->add("upsample", std::make_shared<VaeUpsample>(c, out));
  return level;
}

// block_1, attn_1 (when config.mid_attention), block_2, run in that order.
std::shared_ptr<VaeLevel> make_mid(const VaeConfig& c, int64_t channels) {
  auto mid = std::make_shared<VaeLevel>("VaeMidBlock");
  mid->add("block_1", std::make_shared<VaeResnetBlock>(c, channels, channels));
  if (c.mid_attention) mid->add("attn_1", std::make_shared<VaeAttnBlock>(c, channels));
  mid->add("block_2", std::make_shared<VaeResnetBlock>(c, channels, channels));
  return mid;
}

void run_mid(const Module& mid, Tensor& h) {
  for (const auto& [name, layer] : mid.children()) h = layer->forward(h);
}

void check_input(const Tensor& x, int64_t channels, const char* what) {
  WICK_CHECK(x.dim() == 4 && x.size(1) == channels && x.size(0) > 0 && x.size(2) > 0 && x.size(3) > 0, what,
             ": expected [B, ", channels, ", H, W], got ", x.describe());
}

}  // namespace

VaeResnetBlock::VaeResnetBlock(const VaeConfig& c, int64_t in_channels, int64_t out_channels) {
  register_module("norm1", group_norm(c, in_channels));
  register_module("conv1", conv(c, in_channels, out_channels, 3, 1, 1));
  register_module("norm2", group_norm(c, out_channels));
  register_module("conv2", conv(c, out_channels, out_channels, 3, 1, 1));
  if (in_channels != out_channels) register_module("nin_shortcut", conv(c, in_channels, out_channels, 1));
}

Tensor VaeResnetBlock::forward(const Tensor& x) {
  // One statement per layer, so each intermediate is freed as soon as the next exists.
  Tensor h = autograd::silu(child("norm1")->forward(x));
  h = child("conv1")->forward(h);
  h = autograd::silu(child("norm2")->forward(h));
  h = child("conv2")->forward(h);
  if (auto shortcut = child("nin_shortcut")) return shortcut->forward(x) + h;
  return x + h;
}

VaeAttnBlock::VaeAttnBlock(const VaeConfig& c, int64_t channels) : query_chunk_(c.attention_query_chunk) {
  register_module("norm", group_norm(c, channels));
  for (const char* projection : {"q", "k", "v", "proj_out"})
    register_module(projection, conv(c, channels, channels, 1));
}

Tensor VaeAttnBlock::forward(const Tensor& x) {
  Tensor h = child("norm")->forward(x);
  Tensor q = child("q")->forward(h), k = child("k")->forward(h), v = child("v")->forward(h);
  h = Tensor();
  Tensor attended = spatial_attention(q, k, v, query_chunk_);
  q = k = v = Tensor();
  return x + child("proj_out")->forward(attended);
}

int64_t attention_chunk_rows(int64_t batch, int64_t n_positions, int64_t query_chunk, DType math_dtype) {
  const int64_t rows =
      query_chunk > 0 ? query_chunk
                      : kAttentionScoreBytes /
                            std::max<int64_t>(1, batch * n_positions * static_cast<int64_t>(dtype_size(math_dtype)));
  return std::clamp<int64_t>(rows, 1, std::max<int64_t>(n_positions, 1));
}

Tensor spatial_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t query_chunk) {
  WICK_CHECK(q.dim() == 4 && q.shape() == k.shape() && q.shape() == v.shape() && is_floating(q.dtype()),
             "spatial_attention: expected q, k, v of one floating shape [B, C, h, w], got ", q.describe(), ", ",
             k.describe(), ", ", v.describe());
  WICK_CHECK(query_chunk >= 0, "spatial_attention: query_chunk must be >= 0, got ", query_chunk);
  const int64_t batch = q.size(0), channels = q.size(1), n = q.size(2) * q.size(3);
  const DType math = q.dtype() == DType::F64 ? DType::F64 : DType::F32;
  // [B, C, N] with the 1/sqrt(C) scale folded into q; softmax runs over the keys (last axis of the scores).
  Tensor q3 = autograd::to_dtype(autograd::reshape(q, {batch, channels, n}), math) *
              (1.0 / std::sqrt(static_cast<double>(channels)));
  Tensor k3 = autograd::to_dtype(autograd::reshape(k, {batch, channels, n}), math);
  Tensor v3 = autograd::to_dtype(autograd::reshape(v, {batch, channels, n}), math);
  const int64_t rows = attention_chunk_rows(batch, n, query_chunk, math);
  // out[:, :, i] = v @ softmax(q_i^T k)^T for the query positions i of each chunk.
  auto attend = [&](const Tensor& queries) {
    Tensor probabilities = autograd::softmax(autograd::matmul(queries, k3, /*transpose_a=*/true, false), -1);
    return autograd::matmul(v3, probabilities, false, /*transpose_b=*/true);
  };
  Tensor out;
  if (rows == n) {
    out = attend(q3);
  } else {
    out = Tensor::empty({batch, channels, n}, math, q.device());
    for (int64_t start = 0; start < n; start += rows) {
      const int64_t length = std::min(rows, n - start);
      out.narrow(2, start, length).copy_from(attend(autograd::narrow(q3, 2, start, length)));
    }
  }
  return autograd::to_dtype(autograd::reshape(out, q.shape()), q.dtype());
}

VaeDownsample::VaeDownsample(const VaeConfig& c, int64_t channels) {
  register_module("conv", conv(c, channels, channels, 3, /*stride=*/2, /*padding=*/0));
}

Tensor VaeDownsample::forward(const Tensor& x) { return child("conv")->forward(autograd::pad(x, {0, 1, 0, 1})); }

VaeUpsample::VaeUpsample(const VaeConfig& c, int64_t channels) {
  register_module("conv", conv(c, channels, channels, 3, 1, /*padding=*/1));
}

Tensor VaeUpsample::forward(const Tensor& x) { return child("conv")->forward(upsample_nearest2x(x)); }

Tensor upsample_nearest2x(const Tensor& x) {
  WICK_CHECK(x.dim() == 4, "upsample_nearest2x: expected [B, C, H, W], got ", x.describe());
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  // [B, C, H, 1, W, 1] broadcast to [B, C, H, 2, W, 2], then one copy into [B, C, 2H, 2W].
  Tensor repeated = autograd::expand(autograd::reshape(x, {b, c, h, 1, w, 1}), {b, c, h, 2, w, 2});
  return autograd::reshape(repeated, {b, c, 2 * h, 2 * w});
}

VaeLatentBatchNorm::VaeLatentBatchNorm(const VaeConfig& c) {
  const Shape shape = {c.latent_patch * c.latent_patch * c.z_channels};
  register_parameter("running_mean", &running_mean_,
                     c.initialize ? zeros(shape, DType::F32, c.device) : Tensor::empty(shape, DType::F32, c.device),
                     /*trainable=*/false);
  register_parameter("running_var", &running_var_,
                     c.initialize ? ones(shape, DType::F32, c.device) : Tensor::empty(shape, DType::F32, c.device),
                     /*trainable=*/false);
}

VaeEncoder::VaeEncoder(const VaeConfig& c) {
  const std::vector<int64_t>& ch = c.block_channels;
  const int64_t n = c.n_levels();
  register_module("conv_in", conv(c, c.in_channels, ch[0], 3, 1, 1));
  auto down = register_module("down", std::make_shared<nn::Sequential>());
  for (int64_t i = 0; i < n; ++i)
    down->add(make_level(c, ch[static_cast<size_t>(std::max<int64_t>(i - 1, 0))], ch[static_cast<size_t>(i)],
                         c.encoder_blocks, i + 1 < n ? "downsample" : ""));
  register_module("mid", make_mid(c, ch.back()));
  register_module("norm_out", group_norm(c, ch.back()));
  register_module("conv_out", conv(c, ch.back(), 2 * c.z_channels, 3, 1, 1));
  set_all_trainable(false);
  eval();
}

Tensor VaeEncoder::forward(const Tensor& images) {
  check_input(images, child("conv_in")->parameter("weight").size(1), "VAE encoder");
  Tensor h = child("conv_in")->forward(images);
  for (const auto& [name, level] : child("down")->children()) run_level(*level, h);
  run_mid(*child("mid"), h);
  h = autograd::silu(child("norm_out")->forward(h));
  return child("conv_out")->forward(h);
}

VaeDecoder::VaeDecoder(const VaeConfig& c) {
  const std::vector<int64_t>& ch = c.block_channels;
  const int64_t n = c.n_levels();
  register_module("conv_in", conv(c, c.z_channels, ch.back(), 3, 1, 1));
  register_module("mid", make_mid(c, ch.back()));
  auto up = register_module("up", std::make_shared<nn::Sequential>());
  for (int64_t i = 0; i < n; ++i)  // named up.0 .. up.(n-1); run from up.(n-1), the coarsest
    up->add(make_level(c, ch[static_cast<size_t>(std::min<int64_t>(i + 1, n - 1))], ch[static_cast<size_t>(i)],
                       c.decoder_blocks, i > 0 ? "upsample" : ""));
  register_module("norm_out", group_norm(c, ch[0]));
  register_module("conv_out", conv(c, ch[0], c.out_channels, 3, 1, 1));
  set_all_trainable(false);
  eval();
}

Tensor VaeDecoder::forward(const Tensor& z) {
  check_input(z, child("conv_in")->parameter("weight").size(1), "VAE decoder");
  Tensor h = child("conv_in")->forward(z);
  run_mid(*child("mid"), h);
  const auto& levels = child("up")->children();
  for (auto level = levels.rbegin(); level != levels.rend(); ++level) run_level(*level->second, h);
  h = autograd::silu(child("norm_out")->forward(h));
  return child("conv_out")->forward(h);
}

}  // namespace wick::vae
