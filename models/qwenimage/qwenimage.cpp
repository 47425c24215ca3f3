#include "models/qwenimage/qwenimage.h"

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "models/nn/basic.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"
#include "models/nn/timestep_embedding.h"
#include "models/qwenimage/qwenimage_blocks.h"
#include "models/qwenimage/qwenimage_memory.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/join.h"

namespace wick::qwenimage {
namespace {

constexpr double kTimeScale = 1000.0;  // Timesteps(scale=1000): sigma -> 1000 sigma inside the sinusoid
constexpr double kTextNormEps = 1e-6;

using nn::trainable_tensors;

std::string describe(const Tensor& t) { return t.defined() ? t.describe() : std::string("(none)"); }

}  // namespace

QwenImageTransformer::QwenImageTransformer(QwenImageConfig config) : config_(std::move(config)) {
  const QwenImageConfig& c = config_;
  validate(c);
  nn::LinearOptions options{.bias = true, .dtype = c.dtype, .device = c.device, .initialize = c.initialize};
  register_module("time_text_embed", std::make_shared<QwenTimestepEmbedding>(c));
  register_module("txt_norm", std::make_shared<nn::RMSNorm>(c.text_dim, kTextNormEps, true, c.dtype, c.device));
  register_module("img_in", std::make_shared<nn::Linear>(c.in_channels, c.dim, options));
  register_module("txt_in", std::make_shared<nn::Linear>(c.text_dim, c.dim, options));
  auto blocks = std::make_shared<nn::BlockList>("ModuleList");
  for (int64_t i = 0; i < c.n_layers; ++i) blocks->add(std::make_shared<QwenImageBlock>(c));
  register_module("transformer_blocks", blocks);
  register_module("norm_out", std::make_shared<QwenImageNormOut>(c));
  register_module("proj_out", std::make_shared<nn::Linear>(c.dim, c.patch_features(), options));
}

void QwenImageTransformer::check_inputs(const Tensor& tokens, const std::vector<TokenGrid>& grids, const Tensor& t,
                                        const Tensor& context, const Tensor& context_mask) const {
  const QwenImageConfig& c = config_;
  WICK_CHECK(tokens.defined() && tokens.dim() == 3 && tokens.size(2) == c.in_channels && is_floating(tokens.dtype()),
             "Qwen-Image: tokens ", describe(tokens), " are not floating [B, N, ", c.in_channels, "] (packed latents)");
  const int64_t batch = tokens.size(0);
  int64_t n = 0;
  for (const TokenGrid& g : grids) n += g.tokens();
  WICK_CHECK(!grids.empty() && n == tokens.size(1), "Qwen-Image: ", grids.size(), " token grids hold ", n,
             " tokens but the packed latents hold ", tokens.size(1),
             " (the target's grid first, then each reference's)");
  WICK_CHECK(
      t.defined() && t.dim() == 1 && t.size(0) == batch && is_floating(t.dtype()) && t.device() == tokens.device(),
      "Qwen-Image: t ", describe(t), " must be a floating [", batch, "] vector (sigma) on ", tokens.device().str());
  WICK_CHECK(context.defined() && context.dim() == 3 && context.size(0) == batch && context.size(1) > 0 &&
                 context.size(2) == c.text_dim && context.device() == tokens.device(),
             "Qwen-Image: context ", describe(context), " is not [", batch, ", L, ", c.text_dim, "] (L >= 1) on ",
             tokens.device().str());
  WICK_CHECK(!context_mask.defined() ||
                 (context_mask.dim() == 2 && context_mask.size(0) == batch && context_mask.size(1) == context.size(1)),
             "Qwen-Image: context_mask ", describe(context_mask), " is not [", batch, ", ", context.size(1), "]");
}

Tensor QwenImageTransformer::embed_time(const Tensor& t, DType dtype) {
  return child("time_text_embed")->forward(nn::timestep_features_scaled_after(t, kTimeScale, dtype));
}

Tensor QwenImageTransformer::forward_packed(const Tensor& tokens, const std::vector<TokenGrid>& grids, const Tensor& t,
                                            const Tensor& context, const Tensor& context_mask) {
  check_inputs(tokens, grids, t, context, context_mask);
  const QwenImageConfig& c = config_;
  const DType dtype = tokens.dtype();
  const Device device = tokens.device();
  const int64_t n_image = tokens.size(1), n_text = context.size(1);

  BlockTime time{.temb = embed_time(t, dtype), .temb_zero = Tensor(), .n_target = grids[0].tokens()};
  // Edit-2511: the reference images' tokens are modulated at t = 0 (only when there are any: without
  // references every token is the target's and the result is the plain model's).
  if (c.zero_cond_t && grids.size() > 1) time.temb_zero = embed_time(zeros_like(t), dtype);
  Tensor img = child("img_in")->forward(tokens);
  Tensor txt = child("txt_in")->forward(child("txt_norm")->forward(autograd::to_dtype(context, dtype)));

  const Tensor positions = wick::concat({text_positions(grids, n_text), image_positions(grids)}, 0);
  RopeTables rope = rope_frequencies(positions, c.axes_dims, c.theta);
  rope.cos = rope.cos.unsqueeze(1).to(device);  // [L + N, 1, D/2]: one table for every head
  rope.sin = rope.sin.unsqueeze(1).to(device);
  const Tensor mask = joint_key_mask(context_mask, n_image, device);

  if (swapper_) swapper_->begin_forward(autograd::grad_enabled() && c.gradient_checkpointing);
  BlockSwapper* swapper = swapper_.get();
  size_t position = 0;
  for (const auto& [name, module] : child("transformer_blocks")->children()) {
    auto* block = static_cast<QwenImageBlock*>(module.get());
    const int swapped = position < swap_index_.size() ? swap_index_[position] : -1;
    ++position;
    const int64_t n_target = time.n_target;
    auto run = [block, rope, mask, swapper, swapped, n_target](const std::vector<Tensor>& in) {
      SwappedBlock resident(swapper, swapped);
      BlockTime block_time{.temb = in[2], .temb_zero = in.size() > 3 ? in[3] : Tensor(), .n_target = n_target};
      auto [x, y] = block->run(in[0], in[1], block_time, rope, mask);
      return std::vector<Tensor>{x, y};
    };
    std::vector<Tensor> inputs{img, txt, time.temb};
    if (time.temb_zero.defined()) inputs.push_back(time.temb_zero);
    std::vector<Tensor> out =
        c.gradient_checkpointing ? autograd::checkpoint(run, inputs, trainable_tensors(*block)) : run(inputs);
    img = out[0];
    txt = out[1];
  }
  Tensor x = static_cast<QwenImageNormOut*>(child("norm_out").get())->run(img, time.temb);
  return child("proj_out")->forward(x);
}

Tensor QwenImageTransformer::forward(const Tensor& latents, const Tensor& t, const Tensor& context,
                                     const Tensor& context_mask, const std::vector<Tensor>& references) {
  const QwenImageConfig& c = config_;
  const int64_t p = c.patch_size;
  auto check_latents = [&](const Tensor& x, const std::string& what) {
    WICK_CHECK(x.defined() && x.dim() == 4 && x.size(1) == c.out_channels && x.size(2) > 0 && x.size(3) > 0 &&
                   x.size(2) % p == 0 && x.size(3) % p == 0 && x.size(0) == latents.size(0) &&
                   x.dtype() == latents.dtype() && x.device() == latents.device(),
               "Qwen-Image: ", what, " ", describe(x), " is not [B, ", c.out_channels,
               ", H, W] with H and W positive multiples of ", p, " (as the target latents' B, dtype and device)");
  };
  WICK_CHECK(latents.defined() && latents.dim() == 4, "Qwen-Image: latents ", describe(latents),
             " must be [B, C, H, W]");
  check_latents(latents, "latents");
  std::vector<TokenGrid> grids{{latents.size(2) / p, latents.size(3) / p}};
  std::vector<Tensor> packed{pack_latents(latents, p)};
  for (size_t i = 0; i < references.size(); ++i) {
    check_latents(references[i], "reference " + std::to_string(i));
    grids.push_back({references[i].size(2) / p, references[i].size(3) / p});
    packed.push_back(pack_latents(references[i], p));
  }
  Tensor tokens = packed.size() == 1 ? packed[0] : autograd::concat(packed, 1);
  Tensor out = forward_packed(tokens, grids, t, context, context_mask);
  if (packed.size() > 1) out = autograd::narrow(out, 1, 0, grids[0].tokens());
  return unpack_latents(out, p, latents.size(2), latents.size(3));
}

Tensor QwenImageTransformer::predict(const Tensor& x_sigma, const Tensor& sigma, const diffusion::Conditioning& cond) {
  WICK_CHECK(sigma.defined() && sigma.dim() == 1 && is_floating(sigma.dtype()), "Qwen-Image: sigma ", describe(sigma),
             " must be a floating [B] vector");
  // The pipelines' and trainers' timestep: the scheduler's timestep (sigma x 1000, f32) divided by 1000.
  const Tensor t = autograd::div(autograd::mul(sigma.to(DType::F32), 1000.0), 1000.0);
  return forward(x_sigma, t, cond.context, cond.context_mask);
}

std::string QwenImageTransformer::summary() const {
  const QwenImageConfig& c = config_;
  return "Qwen-Image (" + std::to_string(c.n_layers) + " blocks, dim " + std::to_string(c.dim) + ", " +
         dtype_name(c.dtype) + (c.zero_cond_t ? ", zero_cond_t" : "") + ")";
}

ActivationProfile QwenImageTransformer::activation_profile(const ActivationShape& shape, bool checkpointing) const {
  return qwenimage_activation_profile(config_, shape, checkpointing, layer_training_of(*this));
}

void QwenImageTransformer::check_latent_size(int64_t h, int64_t w) const {
  const int64_t p = config_.patch_size;
  WICK_CHECK_KIND(Config, h > 0 && w > 0 && h % p == 0 && w % p == 0, "latents of ", h, "x", w,
                  " do not fit Qwen-Image: their height and width must be multiples of ", p,
                  " (2x2 patches; images are multiples of 16 pixels)");
}

void QwenImageTransformer::set_block_swapper(std::shared_ptr<BlockSwapper> swapper) {
  swap_index_ = swap_indices(swapper.get(), block_paths(), "Qwen-Image");
  swapper_ = std::move(swapper);
}

}  // namespace wick::qwenimage
