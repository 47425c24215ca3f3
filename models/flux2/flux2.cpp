#include "models/flux2/flux2.h"

#include <utility>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "models/flux2/flux2_blocks.h"
#include "models/flux2/flux2_memory.h"
#include "models/nn/basic.h"
#include "models/nn/bfl_layers.h"
#include "models/nn/timestep_embedding.h"
#include "runtime/ops/join.h"

namespace wick::flux2 {
namespace {

constexpr int64_t kFrequencyDim = 256;  // sinusoidal features of time_in / guidance_in
constexpr double kTimeFactor = 1000.0;  // BFL's time_factor: sigma and guidance are scaled by it
constexpr int64_t kReferenceTimeStep = 10;

using nn::BlockList;
using nn::trainable_tensors;

void check_batch_vector(const Tensor& t, const char* what, int64_t batch) {
  WICK_CHECK(t.dim() == 1 && t.size(0) == batch && is_floating(t.dtype()), "FLUX.2: ", what, " ", t.describe(),
             " must be a floating [", batch, "] vector (one value per latent)");
}

std::string describe(const Tensor& t) { return t.defined() ? t.describe() : std::string("(none)"); }

}  // namespace

Tensor pack_tokens(const Tensor& latents) {
  WICK_CHECK(latents.dim() == 4, "FLUX.2 pack_tokens: ", latents.describe(), " is not [B, C, h, w]");
  const int64_t b = latents.size(0), c = latents.size(1), hw = latents.size(2) * latents.size(3);
  return autograd::contiguous(autograd::transpose(autograd::reshape(latents, {b, c, hw}), 1, 2));
}

Tensor unpack_tokens(const Tensor& tokens, int64_t h, int64_t w) {
  WICK_CHECK(tokens.dim() == 3 && h > 0 && w > 0 && tokens.size(1) == h * w, "FLUX.2 unpack_tokens: ",
             tokens.describe(), " is not [B, ", h, " x ", w, ", C]");
  const int64_t b = tokens.size(0), c = tokens.size(2);
  return autograd::reshape(autograd::contiguous(autograd::transpose(tokens, 1, 2)), {b, c, h, w});
}

Tensor image_ids(int64_t h, int64_t w, int64_t t) {
  WICK_CHECK(h > 0 && w > 0, "FLUX.2 image_ids: grid ", h, "x", w, " must be positive");
  std::vector<float> ids(static_cast<size_t>(h * w * 4), 0.0f);
  for (int64_t r = 0; r < h; ++r)
    for (int64_t c = 0; c < w; ++c) {
      float* row = ids.data() + (r * w + c) * 4;
      row[0] = static_cast<float>(t), row[1] = static_cast<float>(r), row[2] = static_cast<float>(c);
    }
  return Tensor::from_vector<float>(ids, {h * w, 4});
}

Tensor text_ids(int64_t n) {
  WICK_CHECK(n > 0, "FLUX.2 text_ids: ", n, " tokens");
  std::vector<float> ids(static_cast<size_t>(n * 4), 0.0f);
  for (int64_t l = 0; l < n; ++l) ids[static_cast<size_t>(l * 4 + 3)] = static_cast<float>(l);
  return Tensor::from_vector<float>(ids, {n, 4});
}

int64_t reference_time(int64_t index) { return kReferenceTimeStep * (index + 1); }

Flux2Transformer::Flux2Transformer(Flux2Config config) : config_(std::move(config)) {
  const Flux2Config& c = config_;
  validate(c);
  const nn::LinearOptions options = linear_options(c);
  register_module("img_in", std::make_shared<nn::Linear>(c.in_channels, c.hidden_size, options));
  register_module("txt_in", std::make_shared<nn::Linear>(c.context_dim, c.hidden_size, options));
  register_module("time_in", std::make_shared<nn::MLPEmbedder>(kFrequencyDim, c.hidden_size, options));
  if (c.guidance_embed)
    register_module("guidance_in", std::make_shared<nn::MLPEmbedder>(kFrequencyDim, c.hidden_size, options));
  register_module("double_stream_modulation_img", std::make_shared<nn::Modulation>(c.hidden_size, 6, options));
  register_module("double_stream_modulation_txt", std::make_shared<nn::Modulation>(c.hidden_size, 6, options));
  register_module("single_stream_modulation", std::make_shared<nn::Modulation>(c.hidden_size, 3, options));
  auto doubles = std::make_shared<BlockList>(), singles = std::make_shared<BlockList>();
  for (int64_t i = 0; i < c.depth; ++i) doubles->add(std::make_shared<DoubleStreamBlock>(c));
  for (int64_t i = 0; i < c.depth_single; ++i) singles->add(std::make_shared<SingleStreamBlock>(c));
  register_module("double_blocks", doubles);
  register_module("single_blocks", singles);
  register_module("final_layer", std::make_shared<nn::LastLayer>(c.hidden_size, c.in_channels, options));
}

const RopeTables& Flux2Transformer::rope_tables(int64_t n_txt, const std::vector<std::pair<int64_t, int64_t>>& grids,
                                                Device device) {
  RopeCache& cache = rope_cache_;
  if (cache.tables.cos.defined() && cache.n_txt == n_txt && cache.grids == grids && cache.device == device)
    return cache.tables;
  std::vector<Tensor> ids = {text_ids(n_txt)};
  int64_t n_tokens = n_txt;
  for (size_t i = 0; i < grids.size(); ++i) {
    const int64_t t = i == 0 ? 0 : reference_time(static_cast<int64_t>(i) - 1);
    ids.push_back(image_ids(grids[i].first, grids[i].second, t));
    n_tokens += grids[i].first * grids[i].second;
  }
  RopeTables tables = rope_frequencies(concat(ids, 0), config_.axes_dim, config_.theta, DType::F32);
  const int64_t half = config_.head_dim() / 2;
  cache = {n_txt, grids, device,
           {tables.cos.reshape({n_tokens, 1, half}).to(device), tables.sin.reshape({n_tokens, 1, half}).to(device)}};
  return cache.tables;
}

void Flux2Transformer::check_inputs(const Tensor& latents, const Tensor& timesteps, const Tensor& context,
                                    const Tensor& guidance, const std::vector<Tensor>& references) const {
  const Flux2Config& c = config_;
  WICK_CHECK(latents.defined() && latents.dim() == 4 && is_floating(latents.dtype()) && latents.size(2) > 0 &&
                 latents.size(3) > 0,
             "FLUX.2: latents ", describe(latents), " must be floating [B, C, h, w] (patchified latents)");
  WICK_CHECK(latents.size(1) == c.in_channels, "FLUX.2: latents ", latents.describe(), " have ", latents.size(1),
             " channels; this model takes ", c.in_channels, " (the VAE's ", c.latent_channels(),
             " channels patchified 2 x 2)");
  const int64_t batch = latents.size(0);
  WICK_CHECK(timesteps.defined(), "FLUX.2: timesteps [", batch, "] are required");
  check_batch_vector(timesteps, "timesteps", batch);
  WICK_CHECK(context.defined() && context.dim() == 3 && context.size(0) == batch && context.size(1) > 0 &&
                 context.size(2) == c.context_dim,
             "FLUX.2: context ", describe(context), " is not [", batch, ", L, ", c.context_dim,
             "] (the text encoder's stacked hidden states, L >= 1)");
  if (c.guidance_embed) {
    WICK_CHECK(guidance.defined(), "FLUX.2: this model embeds guidance (guidance_in, FLUX.2-dev style): ",
               "pass guidance [", batch, "], the raw scale such as 4.0");
    check_batch_vector(guidance, "guidance", batch);
  } else {
    WICK_CHECK(!guidance.defined(), "FLUX.2: guidance ", guidance.describe(),
               " given, but this model has no guidance_in (klein style): pass none");
  }
  for (size_t i = 0; i < references.size(); ++i)
    WICK_CHECK(references[i].defined() && references[i].dim() == 4 && references[i].size(0) == batch &&
                   references[i].size(1) == c.in_channels && references[i].size(2) > 0 && references[i].size(3) > 0,
               "FLUX.2: reference ", i, " ", describe(references[i]), " is not [", batch, ", ", c.in_channels,
               ", h, w]");
  const Device device = latents.device();
  std::vector<const Tensor*> others = {&timesteps, &context, &guidance};
  for (const Tensor& r : references) others.push_back(&r);
  for (const Tensor* t : others)
    WICK_CHECK(!t->defined() || t->device() == device, "FLUX.2: ", t->describe(), " is not on the latents' device ",
               device.str());
}

Tensor Flux2Transformer::forward(const Tensor& latents, const Tensor& timesteps, const Tensor& context,
                                 const Tensor& guidance, const std::vector<Tensor>& references) {
  check_inputs(latents, timesteps, context, guidance, references);
  const Flux2Config& c = config_;
  const DType dtype = latents.dtype();
  const int64_t height = latents.size(2), width = latents.size(3), n_target = height * width;
  const int64_t n_txt = context.size(1);

  // Image tokens: the target's, then each reference's; their grids in that order.
  std::vector<Tensor> image_tokens = {pack_tokens(latents)};
  std::vector<std::pair<int64_t, int64_t>> grids = {{height, width}};
  for (const Tensor& r : references) {
    image_tokens.push_back(pack_tokens(autograd::to_dtype(r, dtype)));
    grids.emplace_back(r.size(2), r.size(3));
  }
  Tensor img = child("img_in")->forward(image_tokens.size() == 1 ? image_tokens[0] : autograd::concat(image_tokens, 1));
  Tensor txt = child("txt_in")->forward(autograd::to_dtype(context, dtype));

  Tensor vec = child("time_in")->forward(nn::timestep_features_exact(timesteps, kTimeFactor, dtype));
  if (c.guidance_embed)
    vec = autograd::add(vec, child("guidance_in")->forward(nn::timestep_features_exact(guidance, kTimeFactor, dtype)));
  // The shared modulations: one Linear each on SiLU(vec), chunked; every block reads the same chunks.
  const Tensor silu_vec = autograd::silu(vec);
  auto chunks = [&](const char* name) { return static_cast<nn::Modulation*>(child(name).get())->chunks(silu_vec); };
  const std::vector<Tensor> img_mod = chunks("double_stream_modulation_img");
  const std::vector<Tensor> txt_mod = chunks("double_stream_modulation_txt");
  const std::vector<Tensor> single_mod = chunks("single_stream_modulation");

  const RopeTables rope = rope_tables(n_txt, grids, latents.device());

  // Each block runs between its swapper's acquire and release (when it is swapped), in forward and in
  // its checkpoint's recomputation. The modulation chunks are checkpoint inputs, so their gradients
  // flow back to the shared Linears from every block.
  BlockSwapper* swapper = swapper_.get();
  if (swapper) swapper->begin_forward(autograd::grad_enabled() && c.gradient_checkpointing);
  size_t position = 0;
  for (const auto& [name, module] : child("double_blocks")->children()) {
    auto* block = static_cast<DoubleStreamBlock*>(module.get());
    const int swapped = swap_index(position++);
    auto run = [block, rope, swapper, swapped](const std::vector<Tensor>& in) {
      SwappedBlock resident(swapper, swapped);
      const std::vector<Tensor> img_chunks(in.begin() + 2, in.begin() + 8), txt_chunks(in.begin() + 8, in.end());
      auto [img_out, txt_out] = block->run(in[0], in[1], img_chunks, txt_chunks, rope);
      return std::vector<Tensor>{img_out, txt_out};
    };
    std::vector<Tensor> inputs = {img, txt};
    inputs.insert(inputs.end(), img_mod.begin(), img_mod.end());
    inputs.insert(inputs.end(), txt_mod.begin(), txt_mod.end());
    std::vector<Tensor> out =
        c.gradient_checkpointing ? autograd::checkpoint(run, inputs, trainable_tensors(*block)) : run(inputs);
    img = out[0], txt = out[1];
  }
  Tensor x = autograd::concat({txt, img}, 1);
  for (const auto& [name, module] : child("single_blocks")->children()) {
    auto* block = static_cast<SingleStreamBlock*>(module.get());
    const int swapped = swap_index(position++);
    auto run = [block, rope, swapper, swapped](const std::vector<Tensor>& in) {
      SwappedBlock resident(swapper, swapped);
      return std::vector<Tensor>{block->run(in[0], {in[1], in[2], in[3]}, rope)};
    };
    const std::vector<Tensor> inputs = {x, single_mod[0], single_mod[1], single_mod[2]};
    x = (c.gradient_checkpointing ? autograd::checkpoint(run, inputs, trainable_tensors(*block)) : run(inputs))[0];
  }
  img = autograd::narrow(x, 1, n_txt, n_target);  // the target's tokens; the references' are dropped
  Tensor out = static_cast<nn::LastLayer*>(child("final_layer").get())->run(img, silu_vec);
  return unpack_tokens(out, height, width);
}

Tensor Flux2Transformer::predict(const Tensor& x_t, const Tensor& time, const diffusion::Conditioning& cond) {
  Tensor guidance;
  if (config_.guidance_embed)
    guidance = cond.guidance.defined()
                   ? cond.guidance
                   : Tensor::from_vector<float>(std::vector<float>(static_cast<size_t>(x_t.size(0)),
                                                                   static_cast<float>(default_guidance_)),
                                                {x_t.size(0)}, x_t.device());
  return forward(x_t, time, cond.context, guidance);
}

std::string Flux2Transformer::summary() const {
  const Flux2Config& c = config_;
  return std::string("FLUX.2-") + (c.guidance_embed ? "dev" : "klein") + " (" + std::to_string(c.depth) +
         " double + " + std::to_string(c.depth_single) + " single blocks, hidden " + std::to_string(c.hidden_size) +
         ", " + dtype_name(c.dtype) + ")";
}

void Flux2Transformer::set_block_swapper(std::shared_ptr<BlockSwapper> swapper) {
  swap_index_ = swap_indices(swapper.get(), block_paths(), "FLUX.2");
  swapper_ = std::move(swapper);
}

ActivationProfile Flux2Transformer::activation_profile(const ActivationShape& shape, bool checkpointing) const {
  return flux2_activation_profile(config_, shape, checkpointing, layer_training_of(*this));
}

void Flux2Transformer::check_latent_size(int64_t h, int64_t w) const {
  WICK_CHECK_KIND(Config, h > 0 && w > 0, "latents of ", h, "x", w,
                  " do not fit FLUX.2: their height and width must be positive (images are multiples of 16 pixels)");
}

}  // namespace wick::flux2
