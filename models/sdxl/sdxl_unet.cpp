#include "models/sdxl/sdxl_unet.h"

#include <cmath>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_norm.h"
#include "models/nn/basic.h"
#include "models/nn/conv.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"
#include "models/nn/timestep_embedding.h"
#include "models/sdxl/sdxl_blocks.h"
#include "models/sdxl/sdxl_memory.h"
#include "runtime/ops/join.h"

namespace wick::sdxl {
namespace {

constexpr int64_t kVaeFactor = 8;       // SDXL's VAE: pixels per latent
constexpr double kOutNormEps = 1e-5;    // out.0, sgm's GroupNorm32
constexpr double kTimestepScale = 1000.0;  // DiffusionModel's time in [0, 1] -> DDPM timesteps

using nn::BlockList;  // input_blocks, output_blocks, each TimestepEmbedSequential
using nn::trainable_tensors;

std::shared_ptr<BlockList> block(std::vector<std::shared_ptr<Module>> layers) {
  auto out = std::make_shared<BlockList>("TimestepEmbedSequential");
  for (auto& layer : layers) out->add(std::move(layer));
  return out;
}

// [Linear(in, out), SiLU, Linear(out, out)].
std::shared_ptr<nn::Sequential> embedding_mlp(const UnetConfig& c, int64_t in, int64_t out) {
  nn::LinearOptions options{.bias = true, .dtype = c.dtype, .device = c.device, .initialize = c.initialize};
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->add(std::make_shared<nn::Linear>(in, out, options));
  mlp->add(std::make_shared<nn::Activation>("silu"));
  mlp->add(std::make_shared<nn::Linear>(out, out, options));
  return mlp;
}

std::shared_ptr<nn::Conv2d> conv3x3(const UnetConfig& c, int64_t in, int64_t out) {
  return std::make_shared<nn::Conv2d>(
      in, out, 3, nn::Conv2dOptions{.padding = 1, .dtype = c.dtype, .device = c.device, .initialize = c.initialize});
}

std::string describe_or_none(const Tensor& t) { return t.defined() ? t.describe() : std::string("(none)"); }

std::string joined(const std::vector<int64_t>& values, const char* separator) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += separator;
    out += std::to_string(values[i]);
  }
  return out;
}

}  // namespace

Tensor size_conditioning(const std::vector<std::array<int64_t, 6>>& rows, Device device) {
  std::vector<float> values;
  for (const auto& row : rows)
    for (int64_t v : row) values.push_back(static_cast<float>(v));
  return Tensor::from_vector<float>(values, {static_cast<int64_t>(rows.size()), 6}).to(device);
}

Tensor default_size_conditioning(int64_t batch, int64_t latent_height, int64_t latent_width, Device device) {
  const int64_t h = latent_height * kVaeFactor, w = latent_width * kVaeFactor;
  return size_conditioning(std::vector<std::array<int64_t, 6>>(static_cast<size_t>(batch), {h, w, 0, 0, h, w}),
                           device);
}

Unet::Unet(UnetConfig config) : config_(std::move(config)) {
  const UnetConfig& c = config_;
  validate(c);
  register_module("time_embed", embedding_mlp(c, c.model_channels, c.time_embed_dim));
  if (c.adm_in_channels > 0) {
    auto label_emb = std::make_shared<nn::Sequential>();
    label_emb->add(embedding_mlp(c, c.adm_in_channels, c.time_embed_dim));
    register_module("label_emb", label_emb);
  }
  auto input_blocks = std::make_shared<BlockList>("ModuleList");
  input_blocks->add(block({conv3x3(c, c.in_channels, c.model_channels)}));
  std::vector<int64_t> skips = {c.model_channels};
  int64_t ch = c.model_channels;
  for (int64_t level = 0; level < c.n_levels(); ++level) {
    const int64_t width = c.level_channels(level), depth = c.transformer_depth[static_cast<size_t>(level)];
    for (int64_t j = 0; j < c.num_res_blocks; ++j) {
      std::vector<std::shared_ptr<Module>> layers = {std::make_shared<ResBlock>(c, ch, width)};
      ch = width;
      if (depth > 0) layers.push_back(std::make_shared<SpatialTransformer>(c, ch, depth));
      input_blocks->add(block(std::move(layers)));
      skips.push_back(ch);
    }
    if (level < c.n_levels() - 1) {
      input_blocks->add(block({std::make_shared<Downsample>(c, ch)}));
      skips.push_back(ch);
    }
  }
  register_module("input_blocks", input_blocks);
  register_module("middle_block", block({std::make_shared<ResBlock>(c, ch, ch),
                                         std::make_shared<SpatialTransformer>(c, ch, c.transformer_depth_middle),
                                         std::make_shared<ResBlock>(c, ch, ch)}));
  auto output_blocks = std::make_shared<BlockList>("ModuleList");
  for (int64_t level = c.n_levels() - 1; level >= 0; --level) {
    const int64_t width = c.level_channels(level), depth = c.transformer_depth[static_cast<size_t>(level)];
    for (int64_t j = 0; j <= c.num_res_blocks; ++j) {
      const int64_t skip = skips.back();
      skips.pop_back();
      std::vector<std::shared_ptr<Module>> layers = {std::make_shared<ResBlock>(c, ch + skip, width)};
      ch = width;
      if (depth > 0) layers.push_back(std::make_shared<SpatialTransformer>(c, ch, depth));
      if (level > 0 && j == c.num_res_blocks) layers.push_back(std::make_shared<Upsample>(c, ch));
      output_blocks->add(block(std::move(layers)));
    }
  }
  register_module("output_blocks", output_blocks);
  auto out = std::make_shared<nn::Sequential>();
  out->add(std::make_shared<nn::GroupNorm>(c.norm_groups, c.model_channels, kOutNormEps, true, c.dtype, c.device));
  out->add(std::make_shared<nn::Activation>("silu"));
  out->add(conv3x3(c, c.model_channels, c.out_channels));
  register_module("out", out);
}

Tensor Unet::run_block(Module& block, const Tensor& h, const Tensor& silu_emb, const Tensor& context) {
  Tensor x = h;
  for (const auto& [name, layer] : block.children()) {
    if (auto* res = dynamic_cast<ResBlock*>(layer.get()))
      x = res->run(x, silu_emb);
    else if (auto* st = dynamic_cast<SpatialTransformer*>(layer.get()))
      x = st->run(x, context);
    else
      x = layer->forward(x);  // conv_in (or its adapter), Downsample, Upsample
  }
  return x;
}

Tensor Unet::run_checkpointed(Module& block, size_t position, const Tensor& h, const Tensor& skip,
                              const Tensor& silu_emb, const Tensor& context) {
  BlockSwapper* swapper = swapper_.get();
  const int swapped = position < swap_index_.size() ? swap_index_[position] : -1;
  if (!config_.gradient_checkpointing) {
    SwappedBlock resident(swapper, swapped);
    return run_block(block, skip.defined() ? autograd::concat({h, skip}, 1) : h, silu_emb, context);
  }
  Module* target = &block;
  const bool with_skip = skip.defined();
  std::vector<Tensor> inputs = {h, silu_emb, context};
  if (with_skip) inputs.push_back(skip);
  std::vector<Tensor> out = autograd::checkpoint(
      [this, target, with_skip, swapper, swapped](const std::vector<Tensor>& in) {
        SwappedBlock resident(swapper, swapped);
        const Tensor x = with_skip ? autograd::concat({in[0], in[3]}, 1) : in[0];
        return std::vector<Tensor>{run_block(*target, x, in[1], in[2])};
      },
      inputs, trainable_tensors(block));
  return out[0];
}

Tensor Unet::forward(const Tensor& latents, const Tensor& timesteps, const Tensor& context, const Tensor& pooled,
                     const Tensor& size_ids) {
  const UnetConfig& c = config_;
  WICK_CHECK(latents.defined() && latents.dim() == 4 && is_floating(latents.dtype()), "SDXL: latents ",
             describe_or_none(latents), " must be floating [B, C, H, W]");
  WICK_CHECK(latents.size(1) == c.in_channels, "SDXL: latents ", latents.describe(), " have ", latents.size(1),
             " channels; this UNet takes ", c.in_channels);
  const int64_t batch = latents.size(0);
  WICK_CHECK(timesteps.defined() && timesteps.dim() == 1 && timesteps.size(0) == batch &&
                 is_floating(timesteps.dtype()),
             "SDXL: timesteps ", describe_or_none(timesteps), " must be a floating [", batch,
             "] vector (DDPM timesteps 0..999, one per latent)");
  WICK_CHECK(context.defined() && context.dim() == 3 && context.size(0) == batch && context.size(1) > 0 &&
                 context.size(2) == c.context_dim,
             "SDXL: context ", describe_or_none(context), " is not [", batch, ", L, ", c.context_dim,
             "] (CLIP-L and bigG penultimate hidden states, joined; L >= 1)");
  const Device device = latents.device();
  for (const Tensor* t : {&timesteps, &context})
    WICK_CHECK(t->device() == device, "SDXL: ", t->describe(), " is not on the latents' device ", device.str());
  check_latent_size(latents.size(2), latents.size(3));

  const DType dtype = latents.dtype();
  Tensor emb = child("time_embed")->forward(nn::timestep_features(timesteps, 1.0, dtype, c.model_channels));
  if (c.adm_in_channels > 0) {
    WICK_CHECK(pooled.defined() && pooled.dim() == 2 && pooled.size(0) == batch && pooled.size(1) == c.pooled_dim(),
               "SDXL: pooled ", describe_or_none(pooled), " is not [", batch, ", ", c.pooled_dim(),
               "] (bigG's projected pooled output)");
    Tensor sizes =
        size_ids.defined() ? size_ids : default_size_conditioning(batch, latents.size(2), latents.size(3), device);
    WICK_CHECK(sizes.dim() == 2 && sizes.size(0) == batch && sizes.size(1) == 6 && is_floating(sizes.dtype()),
               "SDXL: size_ids ", sizes.describe(), " is not a floating [", batch,
               ", 6] (original h, w, crop top, left, target h, w)");
    WICK_CHECK(pooled.device() == device && sizes.device() == device, "SDXL: pooled ", pooled.describe(),
               " and size_ids ", sizes.describe(), " must be on the latents' device ", device.str());
    // Each of the six values -> its sinusoid (f32), in order; after the pooled vector, then cast once.
    Tensor features = nn::timestep_features(autograd::detach(sizes).contiguous().reshape({batch * 6}), 1.0,
                                            DType::F32, c.size_embed_dim);
    features = features.reshape({batch, 6 * c.size_embed_dim});
    Tensor y = autograd::concat({autograd::to_dtype(pooled, DType::F32), features}, 1);
    emb = autograd::add(emb, child("label_emb")->child("0")->forward(autograd::to_dtype(y, dtype)));
  }
  const Tensor silu_emb = autograd::silu(emb);
  const Tensor ctx = autograd::to_dtype(context, dtype);

  // Blocks in execution order (block_paths), each between its swapper's acquire and release when it is swapped.
  if (swapper_) swapper_->begin_forward(autograd::grad_enabled() && c.gradient_checkpointing);
  size_t position = 0;
  std::vector<Tensor> skips;
  Tensor h = latents;
  for (const auto& [name, input] : child("input_blocks")->children()) {
    h = run_checkpointed(*input, position++, h, Tensor(), silu_emb, ctx);
    skips.push_back(h);
  }
  h = run_checkpointed(*child("middle_block"), position++, h, Tensor(), silu_emb, ctx);
  for (const auto& [name, output] : child("output_blocks")->children()) {
    h = run_checkpointed(*output, position++, h, skips.back(), silu_emb, ctx);
    skips.pop_back();
  }
  const Module& out = *child("out");
  const auto& norm = static_cast<const nn::GroupNorm&>(*out.child("0"));
  h = autograd::silu(autograd::group_norm(h, c.norm_groups, norm.weight_, norm.bias_, kOutNormEps));
  return out.child("2")->forward(h);
}

Tensor Unet::predict(const Tensor& x_t, const Tensor& time, const diffusion::Conditioning& cond) {
  WICK_CHECK(time.defined() && time.dim() == 1, "SDXL: time ", describe_or_none(time), " is not a [B] vector");
  std::vector<float> values = time.to(DType::F32).to_vector<float>();
  for (float& v : values) {
    const double t = static_cast<double>(v) * kTimestepScale, nearest = std::round(t);
    v = static_cast<float>(std::fabs(t - nearest) < 1e-3 ? nearest : t);
  }
  Tensor timesteps = Tensor::from_vector<float>(values, {time.size(0)}).to(time.device());
  return forward(x_t, timesteps, cond.context, cond.pooled, cond.size_ids);
}

std::string Unet::summary() const {
  const UnetConfig& c = config_;
  std::vector<int64_t> widths;
  for (int64_t level = 0; level < c.n_levels(); ++level) widths.push_back(c.level_channels(level));
  return variant_name(c) + " (" + std::to_string(c.n_levels()) + " levels " + joined(widths, "/") +
         ", transformer depth " + joined(c.transformer_depth, "/") + ", middle " +
         std::to_string(c.transformer_depth_middle) + ", " + dtype_name(c.dtype) + ")";
}

void Unet::check_latent_size(int64_t h, int64_t w) const {
  const int64_t m = config_.size_multiple();
  WICK_CHECK_KIND(Config, h > 0 && w > 0 && h % m == 0 && w % m == 0, "latents of ", h, "x", w,
                  " do not fit the SDXL UNet: its ", config_.n_levels(), " levels halve them ", config_.n_levels() - 1,
                  " times, so their height and width must be multiples of ", m, " (images: multiples of ",
                  m * kVaeFactor, " pixels)");
}

std::vector<std::string> Unet::block_paths() const { return sdxl::block_paths(config_); }

void Unet::set_block_swapper(std::shared_ptr<BlockSwapper> swapper) {
  swap_index_ = swap_indices(swapper.get(), block_paths(), "SDXL");
  swapper_ = std::move(swapper);
}

ActivationProfile Unet::activation_profile(const ActivationShape& shape, bool checkpointing) const {
  return sdxl_activation_profile(config_, shape, checkpointing, layer_training_of(*this));
}

}  // namespace wick::sdxl
