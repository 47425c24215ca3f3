#include "models/flux/flux.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "models/flux/flux_blocks.h"
#include "models/flux/flux_memory.h"
#include "models/nn/basic.h"
#include "models/nn/linear.h"
#include "models/nn/timestep_embedding.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
#include "runtime/ops/rope.h"

namespace wick::flux {
namespace {

constexpr int64_t kFrequencyDim = 256;  // sinusoidal features of time_in / guidance_in
constexpr double kTimeFactor = 1000.0;  // BFL's time_factor: sigma and guidance are scaled by it

using nn::BlockList;
using nn::trainable_tensors;

void check_batch_vector(const Tensor& t, const char* what, int64_t batch) {
  WICK_CHECK(t.dim() == 1 && t.size(0) == batch && is_floating(t.dtype()), "Flux: ", what, " ", t.describe(),
             " must be a floating [", batch, "] vector (one value per latent)");
}

}  // namespace

Tensor pack_latents(const Tensor& latents) {
  WICK_CHECK(latents.dim() == 4 && latents.size(2) % 2 == 0 && latents.size(3) % 2 == 0, "Flux pack_latents: ",
             latents.describe(), " is not [B, C, H, W] with H and W even (2x2 patches)");
  return autograd::patchify(latents, 2);
}

Tensor unpack_latents(const Tensor& packed, int64_t height, int64_t width) {
  WICK_CHECK(packed.dim() == 3 && height > 0 && width > 0 && height % 2 == 0 && width % 2 == 0 &&
                 packed.size(1) == (height / 2) * (width / 2) && packed.size(2) % 4 == 0,
             "Flux unpack_latents: ", packed.describe(), " is not [B, (", height, "/2)(", width,
             "/2), 4C] for an even ", height, "x", width, " latent");
  return autograd::unpatchify(packed, 2, height, width);
}

Tensor image_ids(int64_t h, int64_t w) {
  WICK_CHECK(h > 0 && w > 0, "Flux image_ids: grid ", h, "x", w, " must be positive");
  std::vector<float> ids(static_cast<size_t>(h * w * 3), 0.0f);
  for (int64_t r = 0; r < h; ++r)
    for (int64_t c = 0; c < w; ++c) {
      ids[static_cast<size_t>((r * w + c) * 3 + 1)] = static_cast<float>(r);
      ids[static_cast<size_t>((r * w + c) * 3 + 2)] = static_cast<float>(c);
    }
  return Tensor::from_vector<float>(ids, {h * w, 3});
}

FluxTransformer::FluxTransformer(FluxConfig config) : config_(std::move(config)) {
  const FluxConfig& c = config_;
  validate(c);
  nn::LinearOptions options{.bias = true, .dtype = c.dtype, .device = c.device, .initialize = c.initialize};
  register_module("img_in", std::make_shared<nn::Linear>(c.in_channels, c.hidden_size, options));
  register_module("time_in", std::make_shared<MLPEmbedder>(kFrequencyDim, c.hidden_size, options));
  register_module("vector_in", std::make_shared<MLPEmbedder>(c.vec_dim, c.hidden_size, options));
  if (c.guidance_embed)
    register_module("guidance_in", std::make_shared<MLPEmbedder>(kFrequencyDim, c.hidden_size, options));
  register_module("txt_in", std::make_shared<nn::Linear>(c.context_dim, c.hidden_size, options));
  auto doubles = std::make_shared<BlockList>(), singles = std::make_shared<BlockList>();
  for (int64_t i = 0; i < c.depth; ++i) doubles->add(std::make_shared<DoubleStreamBlock>(c));
  for (int64_t i = 0; i < c.depth_single; ++i) singles->add(std::make_shared<SingleStreamBlock>(c));
  register_module("double_blocks", doubles);
  register_module("single_blocks", singles);
  register_module("final_layer", std::make_shared<LastLayer>(c.hidden_size, c.in_channels, options));
}

const RopeTables& FluxTransformer::rope_tables(int64_t n_txt, int64_t grid_h, int64_t grid_w, Device device) {
  RopeCache& cache = rope_cache_;
  if (cache.tables.cos.defined() && cache.n_txt == n_txt && cache.grid_h == grid_h && cache.grid_w == grid_w &&
      cache.device == device)
    return cache.tables;
  // Position ids of [txt; img]: text (0, 0, 0), image (0, row, column); tables [L, 1, head_dim/2]
  // broadcast over the batch and the heads of q, k [B, L, heads, head_dim].
  Tensor ids = concat({zeros({n_txt, 3}, DType::F32), image_ids(grid_h, grid_w)}, 0);
  RopeTables tables = rope_frequencies(ids, config_.axes_dim, config_.theta, DType::F32);
  const int64_t n_tokens = n_txt + grid_h * grid_w, half = config_.head_dim() / 2;
  cache = {n_txt, grid_h, grid_w, device,
           {tables.cos.reshape({n_tokens, 1, half}).to(device), tables.sin.reshape({n_tokens, 1, half}).to(device)}};
  return cache.tables;
}

Tensor FluxTransformer::forward(const Tensor& latents, const Tensor& timesteps, const Tensor& context,
                                const Tensor& pooled, const Tensor& guidance) {
  const FluxConfig& c = config_;
  WICK_CHECK(latents.defined() && latents.dim() == 4 && is_floating(latents.dtype()), "Flux: latents ",
             latents.defined() ? latents.describe() : std::string("(none)"),
             " must be floating [B, C, H, W] (unpacked)");
  WICK_CHECK(latents.size(1) == c.latent_channels(), "Flux: latents ", latents.describe(), " have ",
             latents.size(1), " channels; this model takes ", c.latent_channels(), " (in_channels ", c.in_channels,
             " = channels x 2 x 2)");
  const int64_t batch = latents.size(0), height = latents.size(2), width = latents.size(3);
  WICK_CHECK(height > 0 && width > 0 && height % 2 == 0 && width % 2 == 0, "Flux: latent height ", height,
             " and width ", width, " must be even (2x2 patches are packed into tokens)");
  WICK_CHECK(timesteps.defined(), "Flux: timesteps [", batch, "] are required");
  check_batch_vector(timesteps, "timesteps", batch);
  WICK_CHECK(context.defined() && context.dim() == 3 && context.size(0) == batch && context.size(1) > 0 &&
                 context.size(2) == c.context_dim,
             "Flux: context ", context.defined() ? context.describe() : std::string("(none)"), " is not [", batch,
             ", L, ", c.context_dim, "] (T5 hidden states, L >= 1)");
  WICK_CHECK(pooled.defined() && pooled.dim() == 2 && pooled.size(0) == batch && pooled.size(1) == c.vec_dim,
             "Flux: pooled ", pooled.defined() ? pooled.describe() : std::string("(none)"), " is not [", batch, ", ",
             c.vec_dim, "] (CLIP pooled output)");
  if (c.guidance_embed) {
    WICK_CHECK(guidance.defined(), "Flux: this model embeds guidance (guidance_in, Flux.1-dev style): pass guidance [",
               batch, "], the raw scale such as 3.5");
    check_batch_vector(guidance, "guidance", batch);
  } else {
    WICK_CHECK(!guidance.defined(), "Flux: guidance ", guidance.describe(),
               " given, but this model has no guidance_in (guidance_embed false, Flux.1-schnell style): pass none");
  }
  const Device device = latents.device();
  for (const Tensor* t : {&timesteps, &context, &pooled, &guidance})
    WICK_CHECK(!t->defined() || t->device() == device, "Flux: ", t->describe(), " is not on the latents' device ",
               device.str());

  const DType dtype = latents.dtype();
  const int64_t n_txt = context.size(1), grid_h = height / 2, grid_w = width / 2;
  Tensor img = child("img_in")->forward(pack_latents(latents));
  Tensor vec = child("time_in")->forward(nn::timestep_features(timesteps, kTimeFactor, dtype));
  if (c.guidance_embed)
    vec = autograd::add(vec, child("guidance_in")->forward(nn::timestep_features(guidance, kTimeFactor, dtype)));
  vec = autograd::add(vec, child("vector_in")->forward(autograd::to_dtype(pooled, dtype)));
  Tensor txt = child("txt_in")->forward(autograd::to_dtype(context, dtype));
  const Tensor silu_vec = autograd::silu(vec);  // every modulation Linear reads SiLU(vec)

  const RopeTables rope = rope_tables(n_txt, grid_h, grid_w, device);

  // Each block runs between its swapper's acquire and release (when it is swapped), in forward and
  // in its checkpoint's recomputation.
  BlockSwapper* swapper = swapper_.get();
  if (swapper) swapper->begin_forward(autograd::grad_enabled() && c.gradient_checkpointing);
  size_t position = 0;
  for (const auto& [name, module] : child("double_blocks")->children()) {
    auto* block = static_cast<DoubleStreamBlock*>(module.get());
    const int swapped = swap_index(position++);
    auto run = [block, rope, swapper, swapped](const std::vector<Tensor>& in) {
      SwappedBlock resident(swapper, swapped);
      auto [img_out, txt_out] = block->run(in[0], in[1], in[2], rope);
      return std::vector<Tensor>{img_out, txt_out};
    };
    std::vector<Tensor> out = c.gradient_checkpointing
                                  ? autograd::checkpoint(run, {img, txt, silu_vec}, trainable_tensors(*block))
                                  : run({img, txt, silu_vec});
    img = out[0], txt = out[1];
  }
  Tensor x = autograd::concat({txt, img}, 1);
  for (const auto& [name, module] : child("single_blocks")->children()) {
    auto* block = static_cast<SingleStreamBlock*>(module.get());
    const int swapped = swap_index(position++);
    auto run = [block, rope, swapper, swapped](const std::vector<Tensor>& in) {
      SwappedBlock resident(swapper, swapped);
      return std::vector<Tensor>{block->run(in[0], in[1], rope)};
    };
    x = (c.gradient_checkpointing ? autograd::checkpoint(run, {x, silu_vec}, trainable_tensors(*block))
                                  : run({x, silu_vec}))[0];
  }
  img = autograd::narrow(x, 1, n_txt, grid_h * grid_w);
  Tensor out = static_cast<LastLayer*>(child("final_layer").get())->run(img, silu_vec);
  return unpack_latents(out, height, width);
}

Tensor FluxTransformer::predict(const Tensor& x_t, const Tensor& time, const diffusion::Conditioning& cond) {
  Tensor guidance;
  if (config_.guidance_embed)
    guidance = cond.guidance.defined()
                   ? cond.guidance
                   : Tensor::from_vector<float>(std::vector<float>(static_cast<size_t>(x_t.size(0)),
                                                                   static_cast<float>(default_guidance_)),
                                                {x_t.size(0)}, x_t.device());
  return forward(x_t, time, cond.context, cond.pooled, guidance);
}

std::string FluxTransformer::summary() const {
  const FluxConfig& c = config_;
  return std::string("Flux.1-") + (c.guidance_embed ? "dev" : "schnell") + " (" + std::to_string(c.depth) +
         " double + " + std::to_string(c.depth_single) + " single blocks, hidden " + std::to_string(c.hidden_size) +
         ", " + dtype_name(c.dtype) + ")";
}

std::vector<std::string> FluxTransformer::block_paths() const { return flux::block_paths(config_); }

void FluxTransformer::set_block_swapper(std::shared_ptr<BlockSwapper> swapper) {
  swap_index_ = swap_indices(swapper.get(), block_paths(), "Flux");
  swapper_ = std::move(swapper);
}

ActivationProfile FluxTransformer::activation_profile(const ActivationShape& shape, bool checkpointing) const {
  return flux_activation_profile(config_, shape, checkpointing, layer_training_of(*this));
}

void FluxTransformer::check_latent_size(int64_t h, int64_t w) const {
  WICK_CHECK_KIND(Config, h > 0 && w > 0 && h % 2 == 0 && w % 2 == 0, "latents of ", h, "x", w,
                  " do not fit Flux: their height and width must be even (2x2 patches are packed into tokens; "
                  "images are multiples of 16 pixels)");
}

}  // namespace wick::flux
