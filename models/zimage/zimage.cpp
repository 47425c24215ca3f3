#include "models/zimage/zimage.h"

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "models/nn/basic.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"
#include "models/nn/timestep_embedding.h"
#include "models/zimage/zimage_blocks.h"
#include "models/zimage/zimage_memory.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/join.h"

namespace wick::zimage {
namespace {

using nn::BlockList;
using nn::trainable_tensors;

// A Module holding one Linear under "<patch>-1" (all_x_embedder) or one FinalLayer (all_final_layer).
class PatchModules : public Module {
 public:
  std::string type_name() const override { return "ModuleDict"; }
  void add(const std::string& key, std::shared_ptr<Module> module) { register_module(key, std::move(module)); }
};

}  // namespace

ZImageTransformer::ZImageTransformer(ZImageConfig config) : config_(std::move(config)) {
  const ZImageConfig& c = config_;
  validate(c);
  const std::string patch = std::to_string(c.patch_size) + "-1";
  nn::LinearOptions options{.bias = true, .dtype = c.dtype, .device = c.device, .initialize = c.initialize};
  auto x_embedders = std::make_shared<PatchModules>();
  x_embedders->add(patch, std::make_shared<nn::Linear>(c.patch_features(), c.dim, options));
  register_module("all_x_embedder", x_embedders);
  auto final_layers = std::make_shared<PatchModules>();
  final_layers->add(patch, std::make_shared<FinalLayer>(c));
  register_module("all_final_layer", final_layers);
  auto noise = std::make_shared<BlockList>(), context = std::make_shared<BlockList>();
  for (int64_t i = 0; i < c.n_refiner_layers; ++i) {
    noise->add(std::make_shared<ZImageBlock>(c, true));
    context->add(std::make_shared<ZImageBlock>(c, false));
  }
  register_module("noise_refiner", noise);
  register_module("context_refiner", context);
  register_module("t_embedder", std::make_shared<TimestepEmbedder>(c));
  auto cap_embedder = std::make_shared<nn::Sequential>();
  cap_embedder->add(std::make_shared<nn::RMSNorm>(c.cap_feat_dim, c.norm_eps, true, c.dtype, c.device));
  cap_embedder->add(std::make_shared<nn::Linear>(c.cap_feat_dim, c.dim, options));
  register_module("cap_embedder", cap_embedder);
  register_parameter("x_pad_token", &x_pad_token_, zeros({1, c.dim}, c.dtype, c.device));
  register_parameter("cap_pad_token", &cap_pad_token_, zeros({1, c.dim}, c.dtype, c.device));
  auto layers = std::make_shared<BlockList>();
  for (int64_t i = 0; i < c.n_layers; ++i) layers->add(std::make_shared<ZImageBlock>(c, true));
  register_module("layers", layers);
}

Tensor ZImageTransformer::run_blocks(const char* list, const PaddedBatch& batch, const Tensor& adaln,
                                     size_t position) {
  Tensor x = batch.x;
  const RopeTables& rope = batch.rope;
  const Tensor& mask = batch.mask;
  BlockSwapper* swapper = swapper_.get();
  for (const auto& [name, module] : child(list)->children()) {
    auto* block = static_cast<ZImageBlock*>(module.get());
    const int swapped = swap_index(position++);
    auto run = [block, rope, mask, swapper, swapped](const std::vector<Tensor>& in) {
      SwappedBlock resident(swapper, swapped);
      return std::vector<Tensor>{block->run(in[0], in.size() > 1 ? in[1] : Tensor(), rope, mask)};
    };
    std::vector<Tensor> inputs = block->modulated() ? std::vector<Tensor>{x, adaln} : std::vector<Tensor>{x};
    x = (config_.gradient_checkpointing ? autograd::checkpoint(run, inputs, trainable_tensors(*block))
                                        : run(inputs))[0];
  }
  return x;
}

void ZImageTransformer::check_inputs(const std::vector<Tensor>& latents, const Tensor& t,
                                     const std::vector<Tensor>& captions) const {
  const ZImageConfig& c = config_;
  const int64_t batch = static_cast<int64_t>(latents.size()), p = c.patch_size;
  WICK_CHECK(batch > 0 && captions.size() == latents.size(), "Z-Image: ", latents.size(), " latents and ",
             captions.size(), " captions; one caption per latent, at least one");
  WICK_CHECK(t.defined() && t.dim() == 1 && t.size(0) == batch && is_floating(t.dtype()), "Z-Image: t ",
             t.defined() ? t.describe() : std::string("(none)"), " must be a floating [", batch,
             "] vector (1 = clean)");
  const DType dtype = latents[0].defined() ? latents[0].dtype() : c.dtype;
  const Device device = latents[0].defined() ? latents[0].device() : c.device;
  for (int64_t b = 0; b < batch; ++b) {
    const Tensor& x = latents[static_cast<size_t>(b)];
    const Tensor& cap = captions[static_cast<size_t>(b)];
    WICK_CHECK(x.defined() && x.dim() == 3 && x.size(0) == c.in_channels && x.size(1) % p == 0 && x.size(2) % p == 0 &&
                   x.size(1) > 0 && x.size(2) > 0 && x.dtype() == dtype && x.device() == device,
               "Z-Image: latent ", b, " ", x.defined() ? x.describe() : std::string("(none)"), " is not [",
               c.in_channels, ", H, W] with H and W positive multiples of ", p, " in ", dtype_name(dtype), " on ",
               device.str(), " (as latent 0)");
    WICK_CHECK(cap.defined() && cap.dim() == 2 && cap.size(0) > 0 && cap.size(1) == c.cap_feat_dim &&
                   cap.device() == device,
               "Z-Image: caption ", b, " ", cap.defined() ? cap.describe() : std::string("(none)"), " is not [L, ",
               c.cap_feat_dim, "] (L >= 1 caption features, no padding rows) on ", device.str());
  }
  WICK_CHECK(t.device() == device, "Z-Image: t ", t.describe(), " is not on the latents' device ", device.str());
}

void ZImageTransformer::embed_sample(const Tensor& latent, const Tensor& caption, DType dtype, TokenLists& images,
                                     TokenLists& captions) {
  const ZImageConfig& c = config_;
  const int64_t p = c.patch_size;
  const SampleLayout l = sample_layout(latent.size(1), latent.size(2), caption.size(0), p);
  Tensor image = child("all_x_embedder")->child(std::to_string(p) + "-1")->forward(patchify(latent, p));
  if (l.image_padded > l.n_image)
    image = autograd::concat(
        {image, autograd::expand(autograd::to_dtype(x_pad_token_, dtype), {l.image_padded - l.n_image, c.dim})}, 0);
  Tensor text = child("cap_embedder")->forward(autograd::to_dtype(caption, dtype));
  if (l.caption_padded > l.n_caption)
    text = autograd::concat(
        {text, autograd::expand(autograd::to_dtype(cap_pad_token_, dtype), {l.caption_padded - l.n_caption, c.dim})},
        0);
  images.tokens.push_back(image);
  images.positions.push_back(image_positions(l, latent.size(2) / p));
  captions.tokens.push_back(text);
  captions.positions.push_back(caption_positions(l));
}

std::vector<Tensor> ZImageTransformer::forward(const std::vector<Tensor>& latents, const Tensor& t,
                                               const std::vector<Tensor>& captions) {
  check_inputs(latents, t, captions);
  const ZImageConfig& c = config_;
  const DType dtype = latents[0].dtype();
  const Device device = latents[0].device();
  const Tensor adaln = child("t_embedder")->forward(nn::timestep_features(t, c.t_scale, dtype));
  TokenLists images, texts;
  for (size_t b = 0; b < latents.size(); ++b) embed_sample(latents[b], captions[b], dtype, images, texts);

  // Refiners: the image tokens alone (modulated by c), the caption tokens alone (unmodulated).
  const PaddedBatch image_batch = pad_batch(images, c.rope, c.head_dim(), device);
  const PaddedBatch text_batch = pad_batch(texts, c.rope, c.head_dim(), device);
  // Each block runs between its swapper's acquire and release (when it is swapped), in forward and in
  // its checkpoint's recomputation.
  if (swapper_) swapper_->begin_forward(autograd::grad_enabled() && c.gradient_checkpointing);
  const size_t n_refiners = static_cast<size_t>(c.n_refiner_layers);
  const Tensor image = run_blocks("noise_refiner", image_batch, adaln, 0);
  const Tensor text = run_blocks("context_refiner", text_batch, Tensor(), n_refiners);

  // Main layers over [image tokens; caption tokens] of each sample, then the final layer.
  TokenLists unified;
  for (size_t b = 0; b < latents.size(); ++b) {
    const int64_t i = static_cast<int64_t>(b);
    unified.tokens.push_back(
        autograd::concat({autograd::narrow(autograd::select(image, 0, i), 0, 0, image_batch.lengths[b]),
                          autograd::narrow(autograd::select(text, 0, i), 0, 0, text_batch.lengths[b])},
                         0));
    unified.positions.push_back(wick::concat({images.positions[b], texts.positions[b]}, 0));
  }
  Tensor x = run_blocks("layers", pad_batch(unified, c.rope, c.head_dim(), device), adaln, 2 * n_refiners);
  x = static_cast<FinalLayer*>(child("all_final_layer")->child(std::to_string(c.patch_size) + "-1").get())
          ->run(x, adaln);

  std::vector<Tensor> out;
  for (size_t b = 0; b < latents.size(); ++b) {
    const Tensor& latent = latents[b];
    const int64_t n_image = (latent.size(1) / c.patch_size) * (latent.size(2) / c.patch_size);
    Tensor tokens = autograd::narrow(autograd::select(x, 0, static_cast<int64_t>(b)), 0, 0, n_image);
    out.push_back(unpatchify(tokens, c.patch_size, latent.size(1), latent.size(2)));
  }
  return out;
}

Tensor ZImageTransformer::forward_batch(const Tensor& latents, const Tensor& t, const Tensor& context,
                                        const Tensor& context_mask) {
  WICK_CHECK(latents.defined() && latents.dim() == 4, "Z-Image: latents ",
             latents.defined() ? latents.describe() : std::string("(none)"), " must be [B, C, H, W]");
  const int64_t batch = latents.size(0);
  WICK_CHECK(context.defined() && context.dim() == 3 && context.size(0) == batch, "Z-Image: context ",
             context.defined() ? context.describe() : std::string("(none)"), " is not [", batch, ", L, ",
             config_.cap_feat_dim, "]");
  std::vector<int64_t> lengths(static_cast<size_t>(batch), context.size(1));
  if (context_mask.defined()) {
    WICK_CHECK(context_mask.dim() == 2 && context_mask.size(0) == batch && context_mask.size(1) == context.size(1),
               "Z-Image: context_mask ", context_mask.describe(), " is not [", batch, ", ", context.size(1), "]");
    const std::vector<float> mask = context_mask.to(DType::F32).to(Device::cpu()).to_vector<float>();
    for (int64_t b = 0; b < batch; ++b) {
      int64_t n = 0;
      while (n < context.size(1) && mask[static_cast<size_t>(b * context.size(1) + n)] != 0.0f) ++n;
      for (int64_t i = n; i < context.size(1); ++i)
        WICK_CHECK(mask[static_cast<size_t>(b * context.size(1) + i)] == 0.0f, "Z-Image: context_mask row ", b,
                   " is not a prefix of ones (the caption tokens) then zeros (padding)");
      lengths[static_cast<size_t>(b)] = n;
    }
  }
  std::vector<Tensor> xs, caps;
  for (int64_t b = 0; b < batch; ++b) {
    xs.push_back(autograd::select(latents, 0, b));
    const int64_t length = lengths[static_cast<size_t>(b)];
    // A row without caption tokens (a caption dropped for classifier-free training) is one zero feature row.
    caps.push_back(length > 0 ? autograd::narrow(autograd::select(context, 0, b), 0, 0, length)
                              : zeros({1, context.size(2)}, context.dtype(), context.device()));
  }
  std::vector<Tensor> out = forward(xs, t, caps);
  return autograd::stack(out, 0);
}

Tensor ZImageTransformer::predict(const Tensor& x_sigma, const Tensor& sigma, const diffusion::Conditioning& cond) {
  WICK_CHECK(sigma.defined() && sigma.dim() == 1 && is_floating(sigma.dtype()), "Z-Image: sigma ",
             sigma.defined() ? sigma.describe() : std::string("(none)"), " must be a floating [B] vector");
  // The model's time, 1 = clean: (1000 - 1000 sigma) / 1000 in sigma's dtype, as diffusers' and the authors'
  // pipelines and trainers compute it from the scheduler's timesteps (1 - sigma up to rounding, which the model's
  // t_scale of 1000 would magnify to 6e-5 in the sinusoid's argument).
  const Tensor t = autograd::div(autograd::sub(1000.0, autograd::mul(sigma, 1000.0)), 1000.0);
  return autograd::mul(forward_batch(x_sigma, t, cond.context, cond.context_mask), -1.0);
}

void ZImageTransformer::set_block_swapper(std::shared_ptr<BlockSwapper> swapper) {
  swap_index_ = swap_indices(swapper.get(), block_paths(), "Z-Image");
  swapper_ = std::move(swapper);
}

ActivationProfile ZImageTransformer::activation_profile(const ActivationShape& shape, bool checkpointing) const {
  return zimage_activation_profile(config_, shape, checkpointing, layer_training_of(*this));
}

std::string ZImageTransformer::summary() const {
  const ZImageConfig& c = config_;
  return "Z-Image (" + std::to_string(c.n_layers) + " layers + " + std::to_string(c.n_refiner_layers) + " + " +
         std::to_string(c.n_refiner_layers) + " refiners, dim " + std::to_string(c.dim) + ", " + dtype_name(c.dtype) +
         ")";
}

void ZImageTransformer::check_latent_size(int64_t h, int64_t w) const {
  const int64_t p = config_.patch_size;
  WICK_CHECK_KIND(Config, h > 0 && w > 0 && h % p == 0 && w % p == 0, "latents of ", h, "x", w,
                  " do not fit Z-Image: their height and width must be multiples of ", p,
                  " (2x2 patches; images are multiples of 16 pixels)");
}

}  // namespace wick::zimage
