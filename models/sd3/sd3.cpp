#include "models/sd3/sd3.h"

#include <tuple>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_matmul.h"
#include "models/nn/basic.h"
#include "models/nn/conv.h"
#include "models/nn/linear.h"
#include "models/nn/position_table.h"
#include "models/nn/timestep_embedding.h"
#include "models/sd3/sd3_blocks.h"
#include "models/sd3/sd3_memory.h"
#include "runtime/ops/creation.h"

namespace wick::sd3 {
namespace {

constexpr int64_t kFrequencyDim = 256;
constexpr double kTimeFactor = 1000.0;  // SAI's ModelSamplingDiscreteFlow.timestep: σ · 1000

using nn::BlockList;
using nn::trainable_tensors;

// The patch embedding's parameter holder: x_embedder.proj is SAI's Conv2d(C, hidden, p, stride p).
class PatchEmbed : public Module {
 public:
  explicit PatchEmbed(const Sd3Config& c) {
    register_module("proj", std::make_shared<nn::Conv2d>(
                                c.in_channels, c.hidden_size, c.patch_size,
                                nn::Conv2dOptions{.stride = c.patch_size, .dtype = c.dtype, .device = c.device,
                                                  .initialize = c.initialize}));
  }
  std::string type_name() const override { return "PatchEmbed"; }
};

// timestep / pooled embedder: mlp = [Linear(in, hidden), SiLU, Linear(hidden, hidden)] named 0, 1, 2.
class EmbedderMlp : public Module {
 public:
  EmbedderMlp(int64_t in, const Sd3Config& c) {
    nn::LinearOptions options{.bias = true, .dtype = c.dtype, .device = c.device, .initialize = c.initialize};
    auto mlp = std::make_shared<nn::Sequential>();
    mlp->add(std::make_shared<nn::Linear>(in, c.hidden_size, options));
    mlp->add(std::make_shared<nn::Activation>("silu"));
    mlp->add(std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, options));
    register_module("mlp", mlp);
  }
  std::string type_name() const override { return "EmbedderMlp"; }
  Tensor forward(const Tensor& x) override { return child("mlp")->forward(x); }
};

std::string describe_or_none(const Tensor& t) { return t.defined() ? t.describe() : std::string("(none)"); }

}  // namespace

Tensor crop_position_table(const Tensor& table, int64_t table_size, int64_t h, int64_t w) {
  WICK_CHECK(table.dim() == 3 && table.size(0) == 1 && table.size(1) == table_size * table_size,
             "SD3: position table ", table.describe(), " is not [1, ", table_size, "², hidden]");
  WICK_CHECK_KIND(Config, h > 0 && w > 0 && h <= table_size && w <= table_size, "SD3: a latent of ", h, "x", w,
                  " patches does not fit the position table of ", table_size, "x", table_size,
                  " patches (pos_embed_max_size): use smaller images");
  const int64_t top = (table_size - h) / 2, left = (table_size - w) / 2;
  Tensor grid = autograd::reshape(table, {table_size, table_size, table.size(2)});
  Tensor window = autograd::narrow(autograd::narrow(grid, 0, top, h), 1, left, w);
  return autograd::reshape(window, {1, h * w, table.size(2)});
}

Tensor unpatchify(const Tensor& tokens, int64_t patch, int64_t h, int64_t w) {
  WICK_CHECK(tokens.dim() == 3 && tokens.size(1) == h * w && tokens.size(2) % (patch * patch) == 0,
             "SD3 unpatchify: ", tokens.describe(), " is not [B, ", h, "·", w, ", ", patch, "·", patch, "·C]");
  const int64_t batch = tokens.size(0), channels = tokens.size(2) / (patch * patch);
  Tensor x = autograd::reshape(tokens, {batch, h, w, patch, patch, channels});
  x = autograd::permute(x, {0, 5, 1, 3, 2, 4});  // n h w p q c -> n c h p w q
  return autograd::reshape(x, {batch, channels, h * patch, w * patch});
}

MMDiT::MMDiT(Sd3Config config) : config_(std::move(config)) {
  const Sd3Config& c = config_;
  validate(c);
  nn::LinearOptions options{.bias = true, .dtype = c.dtype, .device = c.device, .initialize = c.initialize};
  register_module("x_embedder", std::make_shared<PatchEmbed>(c));
  const int64_t n_positions = c.pos_embed_max_size * c.pos_embed_max_size;
  Tensor table;
  if (!c.initialize) {
    table = Tensor::empty({1, n_positions, c.hidden_size}, c.dtype, c.device);
  } else if (c.hidden_size % 4 == 0) {
    table = Tensor::from_vector<double>(sincos_2d_table(c.hidden_size, c.pos_embed_max_size),
                                        {1, n_positions, c.hidden_size})
                .to(c.dtype)
                .to(c.device);
  } else {
    table = zeros({1, n_positions, c.hidden_size}, c.dtype, c.device);
  }
  // A buffer in SAI's and diffusers' code: loaded with the weights, never trained by LoRA.
  register_parameter("pos_embed", &pos_embed_, table, /*trainable=*/false);
  register_module("t_embedder", std::make_shared<EmbedderMlp>(kFrequencyDim, c));
  register_module("y_embedder", std::make_shared<EmbedderMlp>(c.pooled_dim, c));
  register_module("context_embedder", std::make_shared<nn::Linear>(c.context_dim, c.hidden_size, options));
  auto blocks = std::make_shared<BlockList>();
  for (int64_t i = 0; i < c.depth; ++i) blocks->add(std::make_shared<JointBlock>(c, i));
  register_module("joint_blocks", blocks);
  register_module("final_layer", std::make_shared<FinalLayer>(c));
}

Tensor MMDiT::embed_patches(const Tensor& latents) {
  const Sd3Config& c = config_;
  const int64_t h = latents.size(2) / c.patch_size, w = latents.size(3) / c.patch_size;
  std::shared_ptr<Module> proj = child("x_embedder")->child("proj");
  Tensor tokens;
  if (auto* conv = dynamic_cast<nn::Conv2d*>(proj.get())) {
    // Patches [B, h·w, C·p·p] ordered (c, row, column), as the kernel [hidden, C, p, p] flattens.
    Tensor weight = autograd::reshape(conv->weight_, {c.hidden_size, c.in_channels * c.patch_size * c.patch_size});
    tokens = autograd::linear(autograd::patchify(latents, c.patch_size), weight, conv->bias_);
  } else {  // an adapter on x_embedder.proj: its own convolution, [B, hidden, h, w] -> [B, h·w, hidden]
    Tensor map = proj->forward(latents);
    tokens = autograd::reshape(autograd::transpose(autograd::flatten(map, 2), 1, 2),
                               {latents.size(0), h * w, c.hidden_size});
  }
  Tensor positions = crop_position_table(pos_embed_, c.pos_embed_max_size, h, w);
  return autograd::add(tokens, autograd::to_dtype(positions, tokens.dtype()));
}

Tensor MMDiT::forward(const Tensor& latents, const Tensor& timesteps, const Tensor& context, const Tensor& pooled) {
  const Sd3Config& c = config_;
  WICK_CHECK(latents.defined() && latents.dim() == 4 && is_floating(latents.dtype()), "SD3: latents ",
             describe_or_none(latents), " must be floating [B, C, H, W]");
  WICK_CHECK(latents.size(1) == c.in_channels, "SD3: latents ", latents.describe(), " have ", latents.size(1),
             " channels; this model takes ", c.in_channels);
  const int64_t batch = latents.size(0), height = latents.size(2), width = latents.size(3), p = c.patch_size;
  WICK_CHECK(height % p == 0 && width % p == 0, "SD3: latent height ", height, " and width ", width,
             " must be multiples of the patch size ", p);
  WICK_CHECK(timesteps.defined() && timesteps.dim() == 1 && timesteps.size(0) == batch &&
                 is_floating(timesteps.dtype()),
             "SD3: timesteps ", describe_or_none(timesteps), " must be a floating [", batch,
             "] vector (σ in [0, 1], one per latent)");
  WICK_CHECK(context.defined() && context.dim() == 3 && context.size(0) == batch && context.size(1) > 0 &&
                 context.size(2) == c.context_dim,
             "SD3: context ", describe_or_none(context), " is not [", batch, ", L, ", c.context_dim,
             "] (CLIP-L + bigG padded, then T5-XXL; L >= 1)");
  WICK_CHECK(pooled.defined() && pooled.dim() == 2 && pooled.size(0) == batch && pooled.size(1) == c.pooled_dim,
             "SD3: pooled ", describe_or_none(pooled), " is not [", batch, ", ", c.pooled_dim,
             "] (CLIP-L and bigG pooled)");
  const Device device = latents.device();
  for (const Tensor* t : {&timesteps, &context, &pooled})
    WICK_CHECK(t->device() == device, "SD3: ", t->describe(), " is not on the latents' device ", device.str());
  check_latent_size(height, width);

  const DType dtype = latents.dtype();
  Tensor x = embed_patches(latents);
  Tensor cond = child("t_embedder")->forward(nn::timestep_features(timesteps, kTimeFactor, dtype));
  cond = autograd::add(cond, child("y_embedder")->forward(autograd::to_dtype(pooled, dtype)));
  Tensor ctx = child("context_embedder")->forward(autograd::to_dtype(context, dtype));
  const Tensor silu_c = autograd::silu(cond);  // every adaLN_modulation reads SiLU(c)

  // Each block runs between its swapper's acquire and release (when it is swapped), in forward and in its
  // checkpoint's recomputation.
  BlockSwapper* swapper = swapper_.get();
  if (swapper) swapper->begin_forward(autograd::grad_enabled() && c.gradient_checkpointing);
  size_t position = 0;
  for (const auto& [name, module] : child("joint_blocks")->children()) {
    auto* block = static_cast<JointBlock*>(module.get());
    const int swapped = swap_index(position++);
    if (!c.gradient_checkpointing) {
      SwappedBlock resident(swapper, swapped);
      std::tie(ctx, x) = block->run(ctx, x, silu_c);
      continue;
    }
    std::vector<Tensor> out = autograd::checkpoint(
        [block, swapper, swapped](const std::vector<Tensor>& in) {
          SwappedBlock resident(swapper, swapped);
          auto [ctx_out, x_out] = block->run(in[0], in[1], in[2]);
          return ctx_out.defined() ? std::vector<Tensor>{x_out, ctx_out} : std::vector<Tensor>{x_out};
        },
        {ctx, x, silu_c}, trainable_tensors(*block));
    x = out[0];
    ctx = out.size() > 1 ? out[1] : Tensor();
  }
  Tensor patches = static_cast<FinalLayer*>(child("final_layer").get())->run(x, silu_c);
  return unpatchify(patches, p, height / p, width / p);
}

Tensor MMDiT::predict(const Tensor& x_t, const Tensor& time, const diffusion::Conditioning& cond) {
  return forward(x_t, time, cond.context, cond.pooled);
}

std::string MMDiT::summary() const {
  const Sd3Config& c = config_;
  std::string dual;
  if (!c.dual_attention_layers.empty())
    dual = ", attn2 in " + std::to_string(c.dual_attention_layers.size()) +
           (c.dual_attention_layers.size() == 1 ? " block" : " blocks");
  return variant_name(c) + " (" + std::to_string(c.depth) + " joint blocks, hidden " + std::to_string(c.hidden_size) +
         ", " + std::to_string(c.num_heads) + " heads" + (c.qk_norm ? ", QK norm" : "") + dual + ", " +
         dtype_name(c.dtype) + ")";
}

std::vector<std::string> MMDiT::block_paths() const { return sd3::block_paths(config_); }

void MMDiT::set_block_swapper(std::shared_ptr<BlockSwapper> swapper) {
  swap_index_ = swap_indices(swapper.get(), block_paths(), "SD3");
  swapper_ = std::move(swapper);
}

ActivationProfile MMDiT::activation_profile(const ActivationShape& shape, bool checkpointing) const {
  return sd3_activation_profile(config_, shape, checkpointing, layer_training_of(*this));
}

void MMDiT::check_latent_size(int64_t h, int64_t w) const {
  const Sd3Config& c = config_;
  const int64_t p = c.patch_size, max = c.pos_embed_max_size;
  WICK_CHECK_KIND(Config, h > 0 && w > 0 && h % p == 0 && w % p == 0, "latents of ", h, "x", w,
                  " do not fit SD3: their height and width must be multiples of the patch size ", p,
                  " (images are multiples of ", 8 * p, " pixels)");
  WICK_CHECK_KIND(Config, h / p <= max && w / p <= max, "latents of ", h, "x", w, " (", h / p, "x", w / p,
                  " patches) do not fit SD3's position table of ", max, "x", max, " patches (at most ", max * p,
                  "x", max * p, " latents, ", 8 * max * p, " pixels a side): use smaller buckets");
}

}  // namespace wick::sd3
