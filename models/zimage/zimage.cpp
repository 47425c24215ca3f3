#include "models/zimage/zimage.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "models/nn/basic.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"
#include "models/nn/timestep_embedding.h"
#include "models/zimage/zimage_blocks.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/join.h"

namespace wick::zimage {
namespace {

constexpr int64_t kSequenceMultiple = 32;  // image and caption tokens are padded to multiples of it

int64_t round_up(int64_t n) { return (n + kSequenceMultiple - 1) / kSequenceMultiple * kSequenceMultiple; }

// Numbered children "0", "1", ... (layers, noise_refiner, context_refiner).
class BlockList : public Module {
 public:
  std::string type_name() const override { return "BlockList"; }
  void add(std::shared_ptr<Module> block) { register_module(std::to_string(children().size()), std::move(block)); }
};

// A Module holding one Linear under "<patch>-1" (all_x_embedder) or one FinalLayer (all_final_layer).
class PatchModules : public Module {
 public:
  std::string type_name() const override { return "ModuleDict"; }
  void add(const std::string& key, std::shared_ptr<Module> module) { register_module(key, std::move(module)); }
};

std::vector<Tensor> trainable_tensors(const Module& module) {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : module.trainable_parameters()) out.push_back(tensor);
  return out;
}

// Sequences [L_i, dim] -> [B, max L_i, dim], zeros after each one's end.
Tensor pad_batch(const std::vector<Tensor>& sequences, int64_t length) {
  std::vector<Tensor> rows;
  for (const Tensor& s : sequences) {
    const int64_t missing = length - s.size(0);
    Tensor row = missing == 0 ? s : autograd::concat({s, zeros({missing, s.size(1)}, s.dtype(), s.device())}, 0);
    rows.push_back(row);
  }
  return autograd::stack(rows, 0);
}

// The key mask U8 [B, 1, 1, length] of sequences of `lengths`, or undefined when none is padded.
Tensor key_mask(const std::vector<int64_t>& lengths, int64_t length, Device device) {
  bool padded = false;
  for (int64_t n : lengths) padded = padded || n != length;
  if (!padded) return Tensor();
  std::vector<uint8_t> keep(lengths.size() * static_cast<size_t>(length), 0);
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int64_t i = 0; i < lengths[b]; ++i) keep[b * static_cast<size_t>(length) + static_cast<size_t>(i)] = 1;
  return Tensor::from_vector<uint8_t>(keep, {static_cast<int64_t>(lengths.size()), 1, 1, length}, device);
}

}  // namespace

SampleLayout sample_layout(int64_t height, int64_t width, int64_t caption_length, int64_t patch_size) {
  SampleLayout l;
  l.n_image = (height / patch_size) * (width / patch_size);
  l.image_padded = round_up(l.n_image);
  l.n_caption = caption_length;
  l.caption_padded = round_up(caption_length);
  return l;
}

Tensor image_positions(const SampleLayout& layout, int64_t grid_width) {
  std::vector<float> ids(static_cast<size_t>(layout.image_padded * 3), 0.0f);  // pads: (0, 0, 0)
  for (int64_t i = 0; i < layout.n_image; ++i) {
    ids[static_cast<size_t>(i * 3)] = static_cast<float>(layout.caption_padded + 1);
    ids[static_cast<size_t>(i * 3 + 1)] = static_cast<float>(i / grid_width);
    ids[static_cast<size_t>(i * 3 + 2)] = static_cast<float>(i % grid_width);
  }
  return Tensor::from_vector<float>(ids, {layout.image_padded, 3});
}

Tensor caption_positions(const SampleLayout& layout) {
  std::vector<float> ids(static_cast<size_t>(layout.caption_padded * 3), 0.0f);
  for (int64_t i = 0; i < layout.caption_padded; ++i) ids[static_cast<size_t>(i * 3)] = static_cast<float>(1 + i);
  return Tensor::from_vector<float>(ids, {layout.caption_padded, 3});
}

Tensor patchify(const Tensor& latent, int64_t p) {
  WICK_CHECK(latent.dim() == 3 && latent.size(1) % p == 0 && latent.size(2) % p == 0, "Z-Image patchify: ",
             latent.describe(), " is not [C, H, W] with H and W multiples of ", p);
  const int64_t c = latent.size(0), h = latent.size(1) / p, w = latent.size(2) / p;
  Tensor x = autograd::reshape(latent, {c, h, p, w, p});
  return autograd::reshape(autograd::permute(x, {1, 3, 2, 4, 0}), {h * w, p * p * c});
}

Tensor unpatchify(const Tensor& tokens, int64_t p, int64_t height, int64_t width) {
  const int64_t h = height / p, w = width / p;
  WICK_CHECK(tokens.dim() == 2 && height % p == 0 && width % p == 0 && tokens.size(0) == h * w &&
                 tokens.size(1) % (p * p) == 0,
             "Z-Image unpatchify: ", tokens.describe(), " is not [(", height, "/", p, ")(", width, "/", p, "), ", p,
             "x", p, "xC]");
  const int64_t c = tokens.size(1) / (p * p);
  Tensor x = autograd::reshape(tokens, {h, w, p, p, c});
  return autograd::reshape(autograd::permute(x, {4, 0, 2, 1, 3}), {c, height, width});
}

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

RopeTables ZImageTransformer::rope_tables(const std::vector<Tensor>& positions, int64_t length, Device device) const {
  const ZImageRope& r = config_.rope;
  const int64_t half = config_.head_dim() / 2, batch = static_cast<int64_t>(positions.size());
  // As the authors: per axis, frequencies 1 / theta^(2j / d) in f64, angles position x frequency
  // rounded to f32, cos and sin of the f32 angle. Rows past a sample's end: angle 0.
  std::vector<std::vector<double>> frequencies;
  for (int64_t d : r.axes_dims) {
    std::vector<double> f;
    for (int64_t j = 0; j < d / 2; ++j)
      f.push_back(1.0 / std::pow(r.theta, static_cast<double>(2 * j) / static_cast<double>(d)));
    frequencies.push_back(std::move(f));
  }
  std::vector<float> cos(static_cast<size_t>(batch * length * half), 1.0f), sin(cos.size(), 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<float> ids = positions[static_cast<size_t>(b)].to_vector<float>();
    const int64_t n = static_cast<int64_t>(ids.size()) / 3;
    for (int64_t i = 0; i < n; ++i) {
      size_t out = static_cast<size_t>((b * length + i) * half);
      for (size_t axis = 0; axis < frequencies.size(); ++axis) {
        const int64_t position = static_cast<int64_t>(ids[static_cast<size_t>(i) * 3 + axis]);
        WICK_CHECK(position >= 0 && position < r.axes_lens[axis], "Z-Image: position ", position, " on RoPE axis ",
                   axis, " is beyond axes_lens ", r.axes_lens[axis],
                   " (a caption or image too long for this model's RoPE tables)");
        for (double f : frequencies[axis]) {
          const float angle = static_cast<float>(static_cast<double>(position) * f);
          cos[out] = std::cos(angle);
          sin[out] = std::sin(angle);
          ++out;
        }
      }
    }
  }
  return {Tensor::from_vector<float>(cos, {batch, length, 1, half}, device),
          Tensor::from_vector<float>(sin, {batch, length, 1, half}, device)};
}

Tensor ZImageTransformer::run_blocks(const char* list, Tensor x, const Tensor& adaln, const RopeTables& rope,
                                     const Tensor& mask) {
  for (const auto& [name, module] : child(list)->children()) {
    auto* block = static_cast<ZImageBlock*>(module.get());
    auto run = [block, rope, mask](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{block->run(in[0], in.size() > 1 ? in[1] : Tensor(), rope, mask)};
    };
    std::vector<Tensor> inputs = block->modulated() ? std::vector<Tensor>{x, adaln} : std::vector<Tensor>{x};
    x = (config_.gradient_checkpointing ? autograd::checkpoint(run, inputs, trainable_tensors(*block))
                                        : run(inputs))[0];
  }
  return x;
}

std::vector<Tensor> ZImageTransformer::forward(const std::vector<Tensor>& latents, const Tensor& t,
                                               const std::vector<Tensor>& captions) {
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
    WICK_CHECK(x.defined() && x.dim() == 3 && x.size(0) == c.in_channels && x.size(1) % p == 0 &&
                   x.size(2) % p == 0 && x.size(1) > 0 && x.size(2) > 0 && x.dtype() == dtype && x.device() == device,
               "Z-Image: latent ", b, " ", x.defined() ? x.describe() : std::string("(none)"), " is not [",
               c.in_channels, ", H, W] with H and W positive multiples of ", p, " in ", dtype_name(dtype), " on ",
               device.str(), " (as latent 0)");
    WICK_CHECK(cap.defined() && cap.dim() == 2 && cap.size(0) > 0 && cap.size(1) == c.cap_feat_dim &&
                   cap.device() == device,
               "Z-Image: caption ", b, " ", cap.defined() ? cap.describe() : std::string("(none)"), " is not [L, ",
               c.cap_feat_dim, "] (L >= 1 caption features, no padding rows) on ", device.str());
  }
  WICK_CHECK(t.device() == device, "Z-Image: t ", t.describe(), " is not on the latents' device ", device.str());

  Tensor adaln = child("t_embedder")->forward(nn::timestep_features(t, c.t_scale, dtype));
  const std::string patch = std::to_string(p) + "-1";
  Module& x_embedder = *child("all_x_embedder")->child(patch);
  Module& cap_embedder = *child("cap_embedder");
  const Tensor x_pad = autograd::to_dtype(x_pad_token_, dtype), cap_pad = autograd::to_dtype(cap_pad_token_, dtype);

  std::vector<SampleLayout> layouts;
  std::vector<Tensor> images, texts, image_ids, caption_ids;
  std::vector<int64_t> image_lengths, caption_lengths, unified_lengths;
  int64_t max_image = 0, max_caption = 0, max_unified = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const Tensor& x = latents[static_cast<size_t>(b)];
    const Tensor& cap = captions[static_cast<size_t>(b)];
    const SampleLayout l = sample_layout(x.size(1), x.size(2), cap.size(0), p);
    layouts.push_back(l);
    Tensor image = x_embedder.forward(patchify(x, p));
    if (l.image_padded > l.n_image)
      image = autograd::concat({image, autograd::expand(x_pad, {l.image_padded - l.n_image, c.dim})}, 0);
    Tensor text = cap_embedder.forward(autograd::to_dtype(cap, dtype));
    if (l.caption_padded > l.n_caption)
      text = autograd::concat({text, autograd::expand(cap_pad, {l.caption_padded - l.n_caption, c.dim})}, 0);
    images.push_back(image);
    texts.push_back(text);
    image_ids.push_back(image_positions(l, x.size(2) / p));
    caption_ids.push_back(caption_positions(l));
    image_lengths.push_back(l.image_padded);
    caption_lengths.push_back(l.caption_padded);
    unified_lengths.push_back(l.image_padded + l.caption_padded);
    max_image = std::max(max_image, l.image_padded);
    max_caption = std::max(max_caption, l.caption_padded);
    max_unified = std::max(max_unified, l.image_padded + l.caption_padded);
  }

  // Refiners: the image tokens alone (modulated by t), the caption tokens alone (unmodulated).
  Tensor image = run_blocks("noise_refiner", pad_batch(images, max_image), adaln,
                            rope_tables(image_ids, max_image, device), key_mask(image_lengths, max_image, device));
  Tensor text = run_blocks("context_refiner", pad_batch(texts, max_caption), Tensor(),
                           rope_tables(caption_ids, max_caption, device),
                           key_mask(caption_lengths, max_caption, device));

  // Main layers over [image tokens; caption tokens] of each sample.
  std::vector<Tensor> unified, unified_ids;
  for (int64_t b = 0; b < batch; ++b) {
    const size_t i = static_cast<size_t>(b);
    unified.push_back(autograd::concat({autograd::narrow(autograd::select(image, 0, b), 0, 0, image_lengths[i]),
                                        autograd::narrow(autograd::select(text, 0, b), 0, 0, caption_lengths[i])},
                                       0));
    unified_ids.push_back(wick::concat({image_ids[i], caption_ids[i]}, 0));
  }
  Tensor x = run_blocks("layers", pad_batch(unified, max_unified), adaln, rope_tables(unified_ids, max_unified, device),
                        key_mask(unified_lengths, max_unified, device));
  x = static_cast<FinalLayer*>(child("all_final_layer")->child(patch).get())->run(x, adaln);

  std::vector<Tensor> out;
  for (int64_t b = 0; b < batch; ++b) {
    const Tensor& latent = latents[static_cast<size_t>(b)];
    Tensor tokens = autograd::narrow(autograd::select(x, 0, b), 0, 0, layouts[static_cast<size_t>(b)].n_image);
    out.push_back(unpatchify(tokens, p, latent.size(1), latent.size(2)));
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
    caps.push_back(autograd::narrow(autograd::select(context, 0, b), 0, 0, lengths[static_cast<size_t>(b)]));
  }
  std::vector<Tensor> out = forward(xs, t, caps);
  return autograd::stack(out, 0);
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
