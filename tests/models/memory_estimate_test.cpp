// The memory estimate (models/memory/memory_estimate.h) against the measured peak of one real training
// step on the CPU: a tiny Flux (hidden 128, 2 double + 2 single blocks, context 256, pooled 64), a
// tiny MMDiT (SD3: hidden 128, 2 heads of 64, 3 joint blocks with attn2 in the first, QK norm), a tiny Z-Image
// (dim 128, 2 heads of 64, 2 layers + 1 + 1 refiners, SwiGLU 256), a tiny Qwen-Image (dim 128, 2 heads of 64, 2
// dual-stream blocks, MLP 512, text 256) and a tiny DiT (hidden 128, depth 3, 4 heads), LoRA (rank 4), DoRA and full training, with and
// without gradient checkpointing, adamw and adamw8bit, f32 and bf16, at two or three latent sizes.
// The step is the recipe's: the objective's noisy latents and target, predict, the flow-matching
// loss, backward into a gradient store, the optimizer step through engine/optim. memory_stats(cpu)
// counts every tensor allocation (the models are built in memory: no zero-copy mapping it misses).
//
// Measured on the CPU (peak tensor bytes of the step, model included; batch 2, 16 text tokens; the
// last four over a whole `wick train` run) against the estimate, OMP_NUM_THREADS=1 (the allocation
// sizes do not depend on it); sizes are the latent height = width, H the heads:
//   case                                 measured     estimate  ratio
//   flux f32 H1 lora adamw 16            16978256     16925024  0.997
//   flux f32 H1 lora adamw 32            36342608     36191072  0.996
//   flux f32 H1 lora ckpt adamw 16       12012332     12027456  1.001
//   flux f32 H1 lora ckpt adamw 32       19495724     19606080  1.006
//   flux f32 H1 lora adamw8bit 32        36342608     36191072  0.996
//   flux f32 H1 full adamw 16            53204904     53167136  0.999
//   flux f32 H1 full adamw 64           143496588    142102048  0.990
//   flux f32 H1 full ckpt adamw 64       79413260     78018720  0.982
//   flux f32 H1 full adamw8bit 64       132299404    130904864  0.989
//   flux f32 H1 full ckpt adamw8bit 16   42007720     41969952  0.999
//   flux bf16 H2 lora adamw8bit 16       10062064     10059264  1.000
//   flux bf16 H2 lora adamw8bit 32       20863216     20863488  1.000
//   flux bf16 H2 lora ckpt adamw8bit 32  12014492     12141744  1.011
//   flux bf16 H2 full ckpt adamw8bit 64  51497100     50857120  0.988
//   flux bf16 H2 full adamw 32           49972364     50076320  1.002
//   dit f32 H4 lora adamw 16              8713964      8664832  0.994
//   dit f32 H4 lora adamw 32             20606060     20391040  0.990
//   dit f32 H4 lora ckpt adamw 32        12536940     12566656  1.002
//   dit f32 H4 full adamw8bit 32         33331884     33078400  0.992
//   dit f32 H4 full ckpt adamw8bit 32    24845996     24751910  0.996
//   dit f32 H4 full adamw 16             28610772     28603040  1.000
//   dit f32 H4 dora adamw 32             24784492     25071232  1.012
//   dit f32 H4 dora ckpt adamw 32        13636204     14184064  1.040
//   dit bf16 H4 lora adamw8bit 32        12281932     12059744  0.982
//   dit bf16 H4 lora ckpt adamw8bit 16    4141772      4011232  0.968
//   dit bf16 H4 full ckpt adamw 32       27286836     27319680  1.001
//   dit bf16 H4 dora ckpt adamw 16        5528012      5262304  0.952
//   sd3 f32 H2 lora adamw 16             15836360     15925472  1.006
//   sd3 f32 H2 lora adamw 32             32778440     33162464  1.012
//   sd3 f32 H2 lora ckpt adamw 32        20855884     21250144  1.019
//   sd3 bf16 H2 lora adamw8bit 32        19198844     18939280  0.986
//   sd3 bf16 H2 lora ckpt adamw8bit 32   12837692     12678992  0.988
//   sd3 f32 H2 dora adamw 32             45702668     45607456  0.998
//   sd3 bf16 H2 dora ckpt adamw 16       12033676     11993248  0.997
//   sd3 f32 H2 full adamw 32             63006220     63238432  1.004
//   sd3 f32 H2 full ckpt adamw8bit 64    74064908     73974304  0.999
//   sd3 bf16 H2 full adamw8bit 32        40138804     40304800  1.004
//   zimage f32 H2 lora adamw 16          10198096      9995872  0.980
//   zimage f32 H2 lora adamw 32          21532240     21124192  0.981
//   zimage f32 H2 lora ckpt adamw 32     13749292     14770496  1.074
//   zimage bf16 H2 lora adamw8bit 32     12274352     11831744  0.964
//   zimage bf16 H2 lora ckpt adamw8bit 32 8501148      8799920  1.035
//   zimage f32 H2 full adamw 16          28832932     28850208  1.001
//   zimage f32 H2 full ckpt adamw8bit 32 25292428     25948320  1.026
//   qwenimage f32 H2 lora adamw 16       10368396     10324384  0.996
//   qwenimage f32 H2 lora adamw 32       20834700     20692384  0.993
//   qwenimage f32 H2 lora ckpt adamw 32  15532876     15630176  1.006
//   qwenimage bf16 H2 lora adamw8bit 32  12810700     12284896  0.959
//   qwenimage bf16 H2 lora ckpt adamw8bit 32 9972908   9616064  0.964
//   qwenimage f32 H2 full adamw 16       36615396     37220384  1.017
//   qwenimage f32 H2 full ckpt adamw8bit 32 30242956  29825440  0.986
//   wick train, DiT full (batch 4)       57282660     57361120  1.001
//   wick train, DiT full ckpt            38001764     38291436  1.008
//   wick train, DiT lora                 36298788     36061408  0.993
//   wick train, DiT lora ckpt            20243492     20511968  1.013
// What the nodes keep for backward is counted exactly (the activations left at the end of the
// forward match to a few bytes, printed beside each case); the rest of the error is the workspace of
// backward, measured per block kind (models/flux/flux_memory.cpp, models/dit/dit_memory.cpp,
// models/sd3/sd3_memory.cpp, models/zimage/zimage_memory.cpp, models/qwenimage/qwenimage_memory.cpp). Every case
// lies within -4.8% .. +4.0% (Z-Image's -3.6% .. +7.4%, Qwen-Image's -4.1% .. +1.7%): the tolerance is 10%.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/launch_env.h"
#include "comm/single_group.h"
#include "engine/autograd/backward.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "engine/config/train_config.h"
#include "engine/optim/optimizer.h"
#include "models/memory/memory_check.h"
#include "models/diffusion/objective.h"
#include "models/diffusion/train.h"
#include "models/dit/dit.h"
#include "models/flux/flux.h"
#include "models/flux/flux_memory.h"
#include "models/flux2/flux2.h"
#include "models/flux2/flux2_memory.h"
#include "models/memory/memory_estimate.h"
#include "models/model_factory.h"
#include "models/weights/float8_weights.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "models/sd3/sd3.h"
#include "models/sd3/sd3_memory.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/qwenimage/qwenimage.h"
#include "models/qwenimage/qwenimage_memory.h"
#include "models/zimage/zimage.h"
#include "runtime/memory.h"
#include "runtime/ops/random.h"
#include "tests/models/step_memory.h"
#include "tests/train/synthetic_dataset.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace wick {
namespace {

constexpr double kTolerance = 0.10;
constexpr double kSdxlTolerance = 0.20;  // the SDXL count's (SdxlUnetWithinItsTolerance)


// The tiny MMDiT: hidden 128 in heads of 64 (SAI's width), 3 joint blocks (attn2 in block 0, the last pre-only),
// QK norm, context 256, pooled 64, a 32x32 position table.
sd3::Sd3Config tiny_sd3(DType dtype) {
  return sd3::Sd3Config{.hidden_size = 128, .num_heads = 2, .depth = 3, .context_dim = 256, .pooled_dim = 64,
                        .pos_embed_max_size = 32, .qk_norm = true, .dual_attention_layers = {0}, .dtype = dtype};
}

// The tiny Z-Image: dim 128 in heads of 64, 2 main layers, 1 + 1 refiners, SwiGLU 256, captions of 256 features.
zimage::ZImageConfig tiny_zimage(DType dtype) {
  return zimage::ZImageConfig{.dim = 128, .n_heads = 2, .n_layers = 2, .n_refiner_layers = 1, .ffn_hidden = 256,
                              .cap_feat_dim = 256, .t_hidden = 256,
                              .rope = {.axes_dims = {16, 24, 24}, .axes_lens = {256, 64, 64}, .theta = 256.0},
                              .dtype = dtype};
}

// The tiny Qwen-Image: dim 128 in heads of 64, 2 dual-stream blocks, MLP 512, text of 256 features.
qwenimage::QwenImageConfig tiny_qwenimage(DType dtype) {
  return qwenimage::QwenImageConfig{.dim = 128, .n_heads = 2, .n_layers = 2, .mlp_hidden = 512, .text_dim = 256,
                                    .axes_dims = {16, 24, 24}, .dtype = dtype};
}

// The tiny FLUX.2: hidden 128 in heads of 64 (four RoPE axes of 16), 2 double + 2 single blocks, SwiGLU 384,
// context 256, guidance_in (dev style).
flux2::Flux2Config tiny_flux2(DType dtype) {
  return flux2::Flux2Config{.in_channels = 16, .hidden_size = 128, .num_heads = 2, .depth = 2, .depth_single = 2,
                            .context_dim = 256, .axes_dim = {16, 16, 16, 16}, .dtype = dtype};
}

struct Case {
  std::string arch;     // flux | flux2 | dit | sd3 | zimage | qwenimage
  std::string network;  // lora | dora | full
  bool checkpointing;
  std::string optimizer;
  DType dtype;
  int64_t heads;        // flux: 1 or 2; the DiT has 4
  int64_t size;         // latent height = width

  std::string name() const {
    return arch + " " + dtype_name(dtype) + " H" + std::to_string(heads) + " " + network +
           (checkpointing ? " ckpt " : " ") + optimizer + " " + std::to_string(size);
  }
};

std::shared_ptr<DiffusionModel> build_case(const Case& c) {
  std::shared_ptr<DiffusionModel> model;
  std::vector<std::string> targets;
  if (c.arch == "flux") {
    model = std::make_shared<flux::FluxTransformer>(tiny_flux(c.heads, c.dtype));
    targets = {"double_blocks.*", "single_blocks.*"};
  } else if (c.arch == "flux2") {
    model = std::make_shared<flux2::Flux2Transformer>(tiny_flux2(c.dtype));
    targets = {"double_blocks.*", "single_blocks.*"};
  } else if (c.arch == "zimage") {
    model = std::make_shared<zimage::ZImageTransformer>(tiny_zimage(c.dtype));
    targets = {"layers.*"};  // every Linear of the main layers (Z-Image's default preset "all")
  } else if (c.arch == "qwenimage") {
    model = std::make_shared<qwenimage::QwenImageTransformer>(tiny_qwenimage(c.dtype));
    targets = {"transformer_blocks.*"};  // every Linear of the blocks
  } else if (c.arch == "sd3") {
    model = std::make_shared<sd3::MMDiT>(tiny_sd3(c.dtype));
    targets = {"joint_blocks.*"};  // every Linear of the blocks (sd3's default preset "all")
  } else {
    model = std::make_shared<DiT>(DiTConfig{.in_channels = 4, .input_size = c.size, .hidden_size = 128, .depth = 3,
                                            .num_heads = 4, .text_dim = 64, .pooled_dim = 64, .dtype = c.dtype});
    targets = {"blocks.*.attn.*", "blocks.*.mlp.*"};  // the DiT's default preset (attention_mlp)
  }
  if (c.network == "full")
    model->set_all_trainable(true);
  else
    nn::apply_adapters(*model, {.type = c.network, .patterns = targets, .options = {.rank = 4}});
  return model;
}

TEST(MemoryEstimate, MatchesTheMeasuredPeak) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  const std::vector<Case> cases = {
      // The tiny Flux of the issue (one head of 128), f32: LoRA on every block Linear, and full training.
      {"flux", "lora", false, "adamw", f32, 1, 16},
      {"flux", "lora", false, "adamw", f32, 1, 32},
      {"flux", "lora", true, "adamw", f32, 1, 16},
      {"flux", "lora", true, "adamw", f32, 1, 32},
      {"flux", "lora", false, "adamw8bit", f32, 1, 32},
      {"flux", "full", false, "adamw", f32, 1, 16},
      {"flux", "full", false, "adamw", f32, 1, 64},
      {"flux", "full", true, "adamw", f32, 1, 64},
      {"flux", "full", false, "adamw8bit", f32, 1, 64},
      {"flux", "full", true, "adamw8bit", f32, 1, 16},
      // Two heads (merging them copies in bf16 on the CPU), bf16 (the CPU multiplies in f32).
      {"flux", "lora", false, "adamw8bit", bf16, 2, 16},
      {"flux", "lora", false, "adamw8bit", bf16, 2, 32},
      {"flux", "lora", true, "adamw8bit", bf16, 2, 32},
      {"flux", "full", true, "adamw8bit", bf16, 2, 64},
      {"flux", "full", false, "adamw", bf16, 2, 32},
      // The DiT (a masked joint attention, cross-attention kv over [image; text]).
      {"dit", "lora", false, "adamw", f32, 4, 16},
      {"dit", "lora", false, "adamw", f32, 4, 32},
      {"dit", "lora", true, "adamw", f32, 4, 32},
      {"dit", "full", false, "adamw8bit", f32, 4, 32},
      {"dit", "full", true, "adamw8bit", f32, 4, 32},
      {"dit", "full", false, "adamw", f32, 4, 16},
      {"dit", "dora", false, "adamw", f32, 4, 32},
      {"dit", "dora", true, "adamw", f32, 4, 32},
      {"dit", "lora", false, "adamw8bit", bf16, 4, 32},
      {"dit", "lora", true, "adamw8bit", bf16, 4, 16},
      {"dit", "full", true, "adamw", bf16, 4, 32},
      {"dit", "dora", true, "adamw", bf16, 4, 16},
      // The MMDiT (joint attention over [context; x], attn2, a pre-only last block), LoRA on every block Linear.
      {"sd3", "lora", false, "adamw", f32, 2, 16},
      {"sd3", "lora", false, "adamw", f32, 2, 32},
      {"sd3", "lora", true, "adamw", f32, 2, 32},
      {"sd3", "lora", false, "adamw8bit", bf16, 2, 32},
      {"sd3", "lora", true, "adamw8bit", bf16, 2, 32},
      {"sd3", "dora", false, "adamw", f32, 2, 32},
      {"sd3", "dora", true, "adamw", bf16, 2, 16},
      {"sd3", "full", false, "adamw", f32, 2, 32},
      {"sd3", "full", true, "adamw8bit", f32, 2, 64},
      {"sd3", "full", false, "adamw8bit", bf16, 2, 32},
      // Z-Image (refiners, then [image; caption] tokens padded to multiples of 32), LoRA on the main layers.
      {"zimage", "lora", false, "adamw", f32, 2, 16},
      {"zimage", "lora", false, "adamw", f32, 2, 32},
      {"zimage", "lora", true, "adamw", f32, 2, 32},
      {"zimage", "lora", false, "adamw8bit", bf16, 2, 32},
      {"zimage", "lora", true, "adamw8bit", bf16, 2, 32},
      {"zimage", "full", false, "adamw", f32, 2, 16},
      {"zimage", "full", true, "adamw8bit", f32, 2, 32},
      // Qwen-Image (two streams, joint attention over [text; image], three q/k/v Linears per stream).
      {"qwenimage", "lora", false, "adamw", f32, 2, 16},
      {"qwenimage", "lora", false, "adamw", f32, 2, 32},
      {"qwenimage", "lora", true, "adamw", f32, 2, 32},
      {"qwenimage", "lora", false, "adamw8bit", bf16, 2, 32},
      {"qwenimage", "lora", true, "adamw8bit", bf16, 2, 32},
      {"qwenimage", "full", false, "adamw", f32, 2, 16},
      {"qwenimage", "full", true, "adamw8bit", f32, 2, 32},
      // FLUX.2 (shared modulations, SwiGLU MLPs, no biases), LoRA on every block Linear.
      {"flux2", "lora", false, "adamw", f32, 2, 16},
      {"flux2", "lora", false, "adamw", f32, 2, 32},
      {"flux2", "lora", true, "adamw", f32, 2, 32},
      {"flux2", "lora", false, "adamw8bit", bf16, 2, 32},
      {"flux2", "lora", true, "adamw8bit", bf16, 2, 32},
      {"flux2", "full", false, "adamw", f32, 2, 16},
      {"flux2", "full", true, "adamw8bit", f32, 2, 32},
  };
  std::printf("  %-34s %12s %12s %6s | kept by the forward: measured, counted\n", "case", "measured", "estimate",
              "ratio");
  for (const Case& c : cases) {
    StepShape s{.size = c.size};
    if (c.arch == "dit") s.channels = 4, s.text_dim = 64;
    Measurement m = measure_step([&] { return build_case(c); }, s, c.optimizer, c.checkpointing);
    const double ratio = static_cast<double>(m.estimate.total) / static_cast<double>(m.peak);
    std::printf("  %-34s %12lld %12lld %6.3f | %lld, %lld\n", c.name().c_str(), static_cast<long long>(m.peak),
                static_cast<long long>(m.estimate.total), ratio, static_cast<long long>(m.kept),
                static_cast<long long>(m.profile.kept_bytes()));
    EXPECT_NEAR(ratio, 1.0, kTolerance) << c.name();
    // What the nodes keep is counted exactly (up to the 0-d loss and a few constants).
    EXPECT_NEAR(static_cast<double>(m.profile.kept_bytes()), static_cast<double>(m.kept),
                0.01 * static_cast<double>(m.kept) + 64)
        << c.name();
  }
}

// The SDXL UNet's count (models/sdxl/sdxl_memory.cpp) is coarser than the transformers': a tiny SDXL-like UNet (4
// channels, 32/64 wide, attention at level 1 with heads of 32, context 256, pooled 64) with LoRA on its
// transformers' Linears, or trained in full. Measured (batch 2, 16 text tokens):
//   case                        measured     estimate  ratio | kept: measured, counted
//   sdxl f32 lora 16            18753056     20288304  1.082 | 10059780, 11514880 (1.145)
//   sdxl f32 lora 32            49024544     55155504  1.125 | 39888900, 45693952 (1.146)
//   sdxl f32 lora ckpt 32       17005852     19317040  1.136 |  3376644,  3475456 (1.029)
//   sdxl f32 full 16            51765612     51744832  1.000 | 10985732, 11385856 (1.036)
//   sdxl f32 full ckpt 32       51839340     51843136  1.000 |  3394820,  3475456 (1.024)
//   sdxl bf16 lora 32           26865560     28515496  1.061 | 20954116, 23071744 (1.101)
// It counts over: the blocks before the first adapter keep nothing (no input needs a gradient there), which the
// count does not see. Tolerance 20%.
TEST(MemoryEstimate, SdxlUnetWithinItsTolerance) {
  struct SdxlCase {
    std::string network;
    bool checkpointing;
    DType dtype;
    int64_t size;
  };
  const std::vector<SdxlCase> cases = {{"lora", false, DType::F32, 16}, {"lora", false, DType::F32, 32},
                                       {"lora", true, DType::F32, 32},  {"full", false, DType::F32, 16},
                                       {"full", true, DType::F32, 32},  {"lora", false, DType::BF16, 32}};
  for (const SdxlCase& c : cases) {
    auto build = [&]() -> std::shared_ptr<DiffusionModel> {
      auto model = std::make_shared<sdxl::Unet>(sdxl::UnetConfig{
          .model_channels = 32, .channel_mult = {1, 2}, .transformer_depth = {0, 1}, .transformer_depth_middle = 1,
          .time_embed_dim = 128, .head_dim = 32, .context_dim = 256, .adm_in_channels = 64 + 6 * 256,
          .dtype = c.dtype});
      if (c.network == "full")
        model->set_all_trainable(true);
      else
        nn::apply_adapters(*model, {.patterns = {"*.proj_in", "*.transformer_blocks.*", "*.proj_out"},
                                    .options = {.rank = 4}});
      return model;
    };
    StepShape s{.channels = 4, .size = c.size};
    Measurement m = measure_step(build, s, "adamw", c.checkpointing);
    const std::string name = "sdxl " + std::string(dtype_name(c.dtype)) + " " + c.network +
                             (c.checkpointing ? " ckpt " : " ") + std::to_string(c.size);
    const double ratio = static_cast<double>(m.estimate.total) / static_cast<double>(m.peak);
    const double kept_ratio = static_cast<double>(m.profile.kept_bytes()) / static_cast<double>(m.kept);
    std::printf("  %-26s %12lld %12lld %6.3f | %lld, %lld (%.3f)\n", name.c_str(), static_cast<long long>(m.peak),
                static_cast<long long>(m.estimate.total), ratio, static_cast<long long>(m.kept),
                static_cast<long long>(m.profile.kept_bytes()), kept_ratio);
    EXPECT_NEAR(ratio, 1.0, kSdxlTolerance) << name;
    EXPECT_NEAR(kept_ratio, 1.0, kSdxlTolerance) << name;
  }
}

// A float8 base and swapped blocks (docs/models.md "Float8 base, block swapping and the memory plan") on the
// tiny Flux, LoRA, checkpointing. On the CPU the swapped blocks' weights stay where they were loaded, which
// memory_stats counts and the estimate puts in host memory: added to the estimate before comparing.
TEST(MemoryEstimate, Float8AndSwappingMatchTheMeasuredPeak) {
  struct SwapCase {
    bool float8;
    int64_t swap;
    int64_t size;
  };
  for (const SwapCase& c : {SwapCase{true, 0, 16}, SwapCase{true, 0, 32}, SwapCase{true, 2, 16},
                            SwapCase{false, 4, 16}, SwapCase{true, 4, 32}}) {
    auto build = [&] {
      auto model = std::make_shared<flux::FluxTransformer>(tiny_flux(1, DType::F32));
      model->set_all_trainable(false);  // a frozen base (quantize_linears leaves trainable weights alone)
      if (c.float8) quantize_linears(*model, {"double_blocks.*", "single_blocks.*"}, Float8Scaling::PerRow);
      nn::apply_adapters(*model, {.patterns = {"double_blocks.*", "single_blocks.*"}, .options = {.rank = 4}});
      model->set_gradient_checkpointing(true);
      attach_block_swapper(*model, c.swap, Device::cpu());
      return std::shared_ptr<DiffusionModel>(model);
    };
    Measurement m = measure_step(build, {.size = c.size}, "adamw", true, {.blocks_to_swap = c.swap});
    const int64_t counted = m.estimate.total + m.estimate.swapped_weights;
    const double ratio = static_cast<double>(counted) / static_cast<double>(m.peak);
    std::printf("  flux f32 lora ckpt %s, %lld swapped, %lld: measured %lld, estimate %lld + host %lld (%.3f)\n",
                c.float8 ? "float8" : "f32 base", static_cast<long long>(c.swap), static_cast<long long>(c.size),
                static_cast<long long>(m.peak), static_cast<long long>(m.estimate.total),
                static_cast<long long>(m.estimate.swapped_weights), ratio);
    EXPECT_NEAR(ratio, 1.0, kTolerance) << c.float8 << " " << c.swap << " " << c.size;
    EXPECT_EQ(m.estimate.dequantize_workspace > 0, c.float8);
    EXPECT_EQ(m.estimate.swap_buffers > 0, c.swap > 0) << m.estimate.swap_buffers << " " << c.swap << " " << c.size;
  }
}

// distributed.shard: weights on one rank (the single group: each rank's part is the whole packed block) on the tiny
// Flux, f32 and float8 bases, LoRA, checkpointing: the blocks' weights as shards plus two gathered blocks' buffers,
// against the allocator's measured peak. (The 1/N of several ranks is tests/comm/weight_shards_test.cpp's count.)
TEST(MemoryEstimate, WeightShardingMatchesTheMeasuredPeak) {
  struct ShardCase {
    bool float8;
    int64_t host_blocks;
  };
  for (const ShardCase& c : {ShardCase{false, 0}, ShardCase{true, 0}, ShardCase{true, 2}}) {
    const bool float8 = c.float8;
    auto build = [&] {
      auto model = std::make_shared<flux::FluxTransformer>(tiny_flux(1, DType::F32));
      model->set_all_trainable(false);
      if (float8) quantize_linears(*model, {"double_blocks.*", "single_blocks.*"}, Float8Scaling::PerRow);
      nn::apply_adapters(*model, {.patterns = {"double_blocks.*", "single_blocks.*"}, .options = {.rank = 4}});
      model->set_gradient_checkpointing(true);
      attach_weight_shards(*model, std::make_shared<comm::SingleGroup>(), Device::cpu(), c.host_blocks);
      return std::shared_ptr<DiffusionModel>(model);
    };
    Measurement m = measure_step(build, {.size = 16}, "adamw", true,
                                 {.blocks_to_swap = c.host_blocks, .shard_weights = true});
    // On the CPU the host shards are counted by the allocator too: added to the estimate before comparing.
    const int64_t counted = m.estimate.total + m.estimate.swapped_weights;
    const double ratio = static_cast<double>(counted) / static_cast<double>(m.peak);
    std::printf("  flux lora ckpt %s base, weights sharded over 1 rank, %lld in host memory: measured %lld, "
                "estimate %lld + host %lld (%.3f)\n",
                float8 ? "float8" : "f32", static_cast<long long>(c.host_blocks), static_cast<long long>(m.peak),
                static_cast<long long>(m.estimate.total), static_cast<long long>(m.estimate.swapped_weights), ratio);
    // As with swapping: never more than 10% under; over, 10% (20% with host shards, whose device copies the
    // estimate adds to the step's peak although the measured peak falls where none is alive).
    EXPECT_GE(ratio, 1.0 - kTolerance) << float8 << " " << c.host_blocks;
    EXPECT_LE(ratio, 1.0 + (c.host_blocks > 0 ? kSdxlTolerance : kTolerance)) << float8 << " " << c.host_blocks;
    EXPECT_EQ(m.estimate.swapped_weights > 0, c.host_blocks > 0);
    EXPECT_GT(m.estimate.sharded_weights, 0);
    EXPECT_GT(m.estimate.swap_buffers, 0);
    EXPECT_THAT(describe(m.estimate), HasSubstr(float8 ? "(frozen float8)" : "(frozen f32)"));
    EXPECT_THAT(describe(m.estimate), HasSubstr("gathered-block buffers"));
  }
}

// The same for the tiny MMDiT (3 joint blocks) and the tiny SDXL-like UNet of SdxlUnetWithinItsTolerance (13 blocks;
// its convolutions stay f32 under float8), LoRA on the default presets, checkpointing. Measured (batch 2, 16x16
// latents, 16 text tokens; the estimate plus the host bytes the CPU counts as allocated):
//   sd3 float8, 0 swapped:    measured  7564108, estimate  8187232 + host       0 (1.082)
//   sd3 float8, 2 swapped:    measured  8185676, estimate  8410464 + host 1019904 (1.152)
//   sd3 f32 base, 3 swapped:  measured 17116492, estimate 11510624 + host 6732800 (1.066)
//   sdxl float8, 0 swapped:   measured  8408220, estimate  9127088 + host       0 (1.085)
//   sdxl float8, 7 swapped:   measured  9754524, estimate  7549488 + host 3048064 (1.086)
//   sdxl f32 base, 13 swapped: measured 12772124, estimate 7200048 + host 6308352 (1.058)
// The estimate adds two swapped blocks' device copies to the whole step's peak; on the tiny MMDiT with 2 of 3 blocks
// swapped, swapping raises the measured peak by 621568 bytes and the estimate (with the host bytes) by 1243136, so
// the count is 15% over there (on the safe side: the plan may swap more than needed, not too little). Bounds: the estimate is never
// more than 10% under; over, 10% without swapping (SDXL: its count's 20%), 20% with it.
TEST(MemoryEstimate, Float8AndSwappingOfSd3AndSdxlMatchTheMeasuredPeak) {
  struct SwapCase {
    std::string arch;
    bool float8;
    int64_t swap;
  };
  for (const SwapCase& c : {SwapCase{"sd3", true, 0}, SwapCase{"sd3", true, 2}, SwapCase{"sd3", false, 3},
                            SwapCase{"sdxl", true, 0}, SwapCase{"sdxl", true, 7}, SwapCase{"sdxl", false, 13}}) {
    const bool sdxl = c.arch == "sdxl";
    auto build = [&] {
      std::shared_ptr<DiffusionModel> model;
      std::vector<std::string> targets;
      if (sdxl) {
        model = std::make_shared<sdxl::Unet>(sdxl::UnetConfig{
            .model_channels = 32, .channel_mult = {1, 2}, .transformer_depth = {0, 1}, .transformer_depth_middle = 1,
            .time_embed_dim = 128, .head_dim = 32, .context_dim = 256, .adm_in_channels = 64 + 6 * 256,
            .dtype = DType::F32});
        targets = {"*.proj_in", "*.transformer_blocks.*", "*.proj_out"};
      } else {
        model = std::make_shared<sd3::MMDiT>(tiny_sd3(DType::F32));
        targets = {"joint_blocks.*"};
      }
      model->set_all_trainable(false);
      std::vector<std::string> blocks;
      for (const std::string& path : model->block_paths()) blocks.push_back(path + ".*");
      if (c.float8) quantize_linears(*model, blocks, Float8Scaling::PerRow);
      nn::apply_adapters(*model, {.patterns = targets, .options = {.rank = 4}});
      model->set_gradient_checkpointing(true);
      attach_block_swapper(*model, c.swap, Device::cpu());
      return model;
    };
    const StepShape shape = sdxl ? StepShape{.channels = 4, .size = 16} : StepShape{.size = 16};
    Measurement m = measure_step(build, shape, "adamw", true, {.blocks_to_swap = c.swap});
    const int64_t counted = m.estimate.total + m.estimate.swapped_weights;
    const double ratio = static_cast<double>(counted) / static_cast<double>(m.peak);
    std::printf("  %s %s, %lld swapped: measured %lld, estimate %lld + host %lld (%.3f)\n", c.arch.c_str(),
                c.float8 ? "float8" : "f32 base", static_cast<long long>(c.swap), static_cast<long long>(m.peak),
                static_cast<long long>(m.estimate.total), static_cast<long long>(m.estimate.swapped_weights), ratio);
    EXPECT_GE(ratio, 1.0 - kTolerance) << c.arch << " " << c.float8 << " " << c.swap;
    EXPECT_LE(ratio, 1.0 + (sdxl || c.swap > 0 ? kSdxlTolerance : kTolerance)) << c.arch << " " << c.float8 << " "
                                                                                << c.swap;
    EXPECT_EQ(m.estimate.dequantize_workspace > 0, c.float8);
    EXPECT_EQ(m.estimate.swap_buffers > 0, c.swap > 0);
  }
}

// The optimizer's own allocation (masters, gradient buffer, state) against the estimate's rules,
// unsharded and cut into zero_partition ranges: 8-bit blocks of 256 with f32 absmax, 32-bit state
// below 4096 elements, padding to 256 elements included.
TEST(MemoryEstimate, OptimizerBytesAreTheOptimizersOwn) {
  const std::vector<Shape> shapes = {{300, 70}, {17}, {4096}, {4095}, {64, 65}, {1, 5000}, {3}};
  const std::vector<std::string> names = {"a", "b", "c", "d", "e", "f", "g"};
  for (const std::string name : {"adamw8bit", "adamw", "sgd"}) {
    NamedParameters params;
    std::vector<int64_t> numels;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor p = Tensor::empty(shapes[i], DType::F32);
      autograd::set_requires_grad(p, true);
      params.emplace_back(names[i], p);
      numels.push_back(p.numel());
    }
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    std::unique_ptr<Optimizer> optimizer = make_optimizer(name, params, {.momentum = 0.9f});
    const int64_t allocated = memory_stats(Device::cpu()).current_bytes - before;
    const int64_t flat = optimizer->flat_numel();
    EXPECT_EQ(allocated - 8 * flat, optimizer_state_bytes(numels, name, true, 1, false)) << name;
    // Each rank's range of a sharded state: the estimate is the largest.
    for (int world : {2, 3, 5}) {
      int64_t largest = 0;
      for (const FlatRange& range : zero_partition(flat, world)) {
        std::unique_ptr<Optimizer> shard = make_optimizer(name, params, {.momentum = 0.9f});
        const int64_t unsharded = memory_stats(Device::cpu()).current_bytes;
        shard->shard_state(range.begin, range.end, [](const Tensor& t, int64_t) { return t; });
        // shard_state allocates the range's state and then releases the whole one.
        const int64_t state = memory_stats(Device::cpu()).current_bytes - unsharded +
                              optimizer_state_bytes(numels, name, true, 1, false);
        largest = std::max(largest, state);
      }
      EXPECT_EQ(largest, optimizer_state_bytes(numels, name, true, world, true)) << name << " on " << world << " ranks";
    }
  }
}

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("wick_memory_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The whole recipe (wick train: prefetcher, step loop, checkpoint at the end) against the estimate
// it prints, measured over the run. A LoRA run's base is a zero-copy mapping of its file, which
// memory_stats does not count and the estimate does (it takes RAM all the same): added to the
// measurement.
TEST(MemoryEstimate, TrainRunStaysWithinTheEstimate) {
  fs::path dir = temp_dir("train");
  const std::string dataset = (dir / "data.h5").string();
  testing::write_synthetic_dataset(dataset, {.n_samples = 16, .size = 32});
  std::string base;
  for (const std::string network : {"full", "lora"})
    for (const bool checkpointing : {false, true}) {
      std::string yaml = "name: " + network;
      yaml += checkpointing ? "_ckpt" : "";
      yaml += "\noutput_dir: " + dir.string() + "\ndevice: cpu\n";
      yaml += "model: {hidden_size: 128, depth: 3, num_heads: 4";
      yaml += network == "lora" ? ", name_or_path: " + base + "}\n" : "}\n";  // the full run's model file
      yaml += "network: {type: " + network + ", linear: 4}\n";
      yaml += "train: {batch_size: 4, steps: 2, optimizer: adamw, gradient_checkpointing: ";
      yaml += checkpointing ? "true}\n" : "false}\n";
      yaml += "dataset: {path: " + dataset + "}\nsave: {every: 0, dtype: f32}\n";
      TrainConfig config = parse_config_string(yaml, "<test>", config_schema());
      MemoryEstimate estimate;
      {
        auto data = LatentDataset::open(dataset);
        auto group = comm::make_process_group("none", Device::cpu(), 60.0);
        const DataGeometry geometry = dataset_geometry(*data);
        std::shared_ptr<DiffusionModel> model = build_model(config, geometry, Device::cpu());
        estimate = estimate_training_memory(*model, memory_inputs(config, geometry, *group, Device::cpu()));
      }
      const int64_t before = memory_stats(Device::cpu()).current_bytes;
      reset_peak_memory(Device::cpu());
      TrainResult result = train(config, {.resume = "none", .progress = false});
      const int64_t mapped = network == "lora" ? estimate.frozen_weights : 0;
      const int64_t peak = memory_stats(Device::cpu()).peak_bytes - before + mapped;
      const double ratio = static_cast<double>(estimate.total) / static_cast<double>(peak);
      std::printf("  wick train, DiT %s%s: measured %lld, estimate %lld (%.3f)\n", network.c_str(),
                  checkpointing ? " ckpt" : "", static_cast<long long>(peak), static_cast<long long>(estimate.total),
                  ratio);
      EXPECT_NEAR(ratio, 1.0, kTolerance) << network << (checkpointing ? " ckpt" : "");
      if (network == "full" && result.model_file) base = result.model_file->string();
    }
}

// A run that cannot fit names the numbers and only settings that lower the estimate.
TEST(MemoryEstimate, RefusalNamesTheNumbersAndWhatLowersThem) {
  auto model = std::make_shared<DiT>(DiTConfig{.in_channels = 4, .input_size = 32, .hidden_size = 128, .depth = 3,
                                               .num_heads = 4, .text_dim = 64, .pooled_dim = 64});
  nn::apply_adapters(*model, {.patterns = {"blocks.*.attn.*", "blocks.*.mlp.*"}, .options = {.rank = 4}});
  MemoryInputs in{.batch_size = 8, .latent_height = 32, .latent_width = 32, .text_length = 16, .text_dim = 64,
                  .latent_channels = 4, .pooled_dim = 64, .optimizer = "adamw"};
  const MemoryEstimate estimate = estimate_training_memory(*model, in);
  const int64_t capacity = estimate.total / 2;
  std::vector<std::string> suggestions =
      memory_suggestions(*model, in, estimate, {.lora_rank = 4, .model_dtype = DType::F32}, capacity);
  std::optional<std::string> refusal = memory_refusal(estimate, capacity, "cpu", suggestions);
  ASSERT_TRUE(refusal.has_value());
  std::printf("%s\n", refusal->c_str());
  EXPECT_THAT(*refusal, HasSubstr(format_bytes(estimate.total)));
  EXPECT_THAT(*refusal, HasSubstr(format_bytes(capacity)));
  EXPECT_THAT(*refusal, HasSubstr("WICK_SKIP_MEMORY_CHECK=1"));
  EXPECT_THAT(*refusal, HasSubstr("train.gradient_checkpointing: true"));
  EXPECT_THAT(*refusal, HasSubstr("train.batch_size: "));
  EXPECT_THAT(*refusal, HasSubstr("model.dtype: bf16"));
  // LoRA factors this small keep 32-bit state either way, and sharding adds gather buffers larger
  // than the state it saves: neither is suggested.
  EXPECT_THAT(*refusal, ::testing::Not(HasSubstr("adamw8bit")));
  EXPECT_THAT(*refusal, ::testing::Not(HasSubstr("shard_optimizer")));
  EXPECT_FALSE(memory_refusal(estimate, estimate.total, "cpu", suggestions).has_value());
  EXPECT_GT(available_memory_bytes(Device::cpu()).value_or(0), 0);
}

// check_training_memory on a run far beyond any machine (a million 512 x 512 latents per step):
// a Config error before step 1, unless WICK_SKIP_MEMORY_CHECK=1.
TEST(MemoryEstimate, TrainRefusesARunThatCannotFit) {
  const std::string yaml =
      "name: huge\ndevice: cpu\nmodel: {hidden_size: 32, depth: 2, num_heads: 2}\n"
      "train: {batch_size: 1048576, optimizer: adamw}\ndataset: {path: unused.h5}\n";
  TrainConfig config = parse_config_string(yaml, "<test>", config_schema());
  const DataGeometry geometry{.latent_channels = 4, .latent_sizes = {{512, 512}}, .text_length = 8, .text_dim = 16,
                              .pooled_dim = 16};
  std::shared_ptr<DiffusionModel> model = build_model(config, geometry, Device::cpu());
  auto group = comm::make_process_group("none", Device::cpu(), 60.0);
  ::unsetenv("WICK_SKIP_MEMORY_CHECK");
  try {
    check_training_memory(config, *model, geometry, *group, Device::cpu());
    ADD_FAILURE() << "a run of this size was not refused";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr("the run needs an estimated"));
    EXPECT_THAT(e.what(), HasSubstr("train.batch_size: "));
    EXPECT_THAT(e.what(), HasSubstr("WICK_SKIP_MEMORY_CHECK=1"));
  }
  ::setenv("WICK_SKIP_MEMORY_CHECK", "1", 1);
  EXPECT_GT(check_training_memory(config, *model, geometry, *group, Device::cpu()).estimate.total, int64_t{1} << 40);
  ::unsetenv("WICK_SKIP_MEMORY_CHECK");
}

// Full-size Flux.1-dev without weights (docs/training.md "Memory"): 1024² (4,096 image + 512 text
// tokens), batch 1, LoRA rank 16 on every Linear of both block kinds, bf16, adamw8bit, on a GPU.
// MODELS.md §6.4: the bf16 transformer alone is ~23.8 GB; a bf16 LoRA at 1024² with checkpointing
// fits in 80 GB; HF's blog measured ~26 GB for plain bf16 LoRA.
TEST(MemoryEstimate, FullSizeFluxLora) {
  MemoryInputs in{.batch_size = 1, .latent_height = 128, .latent_width = 128, .text_length = 512, .text_dim = 4096,
                  .latent_channels = 16, .pooled_dim = 768, .compute_dtype = DType::BF16, .optimizer = "adamw8bit",
                  .device = Device::cuda(0)};
  const TrainingPlan lora{.network = "lora", .patterns = {"double_blocks.*", "single_blocks.*"}, .rank = 16};
  in.gradient_checkpointing = true;
  const MemoryEstimate on = flux::estimate_flux_memory(flux::FluxConfig{}, lora, in);
  in.gradient_checkpointing = false;
  const MemoryEstimate off = flux::estimate_flux_memory(flux::FluxConfig{}, lora, in);
  in.gradient_checkpointing = true;
  const MemoryEstimate full = flux::estimate_flux_memory(flux::FluxConfig{}, {.network = "full"}, in);
  MemoryInputs small = in;  // 512² (1,024 image tokens), as the HF blog's QLoRA runs (512 x 768)
  small.latent_height = small.latent_width = 64;
  const MemoryEstimate on_512 = flux::estimate_flux_memory(flux::FluxConfig{}, lora, small);
  std::printf("Flux.1-dev LoRA r16, checkpointing on:  %s\n", describe(on).c_str());
  std::printf("Flux.1-dev LoRA r16, checkpointing off: %s\n", describe(off).c_str());
  std::printf("Flux.1-dev full, checkpointing on:      %s\n", describe(full).c_str());
  std::printf("Flux.1-dev LoRA r16 at 512², checkpointing on: %s\n", describe(on_512).c_str());
  EXPECT_NEAR(static_cast<double>(on.frozen_weights), 23.8e9, 0.05e9);  // 11.9 B parameters in bf16
  EXPECT_EQ(on.n_trainable, 76578816);  // 16 x (in + out) over 10 Linears x 19 double + 3 x 38 single blocks
  EXPECT_LT(on.total, int64_t{80} * 1000 * 1000 * 1000);
  EXPECT_GT(on.total, on.frozen_weights);
  EXPECT_EQ(on.total_other, off.total);
  EXPECT_GT(off.activations, 5 * on.activations);
  EXPECT_GT(full.total, int64_t{120} * 1000 * 1000 * 1000);  // f32 masters, two f32 gradients, 8-bit state
}

// The same full-size Flux.1-dev LoRA with the memory plan's options (docs/training.md "Memory"): a float8
// base (per-row scales) and the last N of the 57 blocks' frozen weights in host memory.
TEST(MemoryEstimate, FullSizeFluxLoraFloat8AndSwapping) {
  MemoryInputs in{.batch_size = 1, .latent_height = 128, .latent_width = 128, .text_length = 512, .text_dim = 4096,
                  .latent_channels = 16, .pooled_dim = 768, .compute_dtype = DType::BF16, .optimizer = "adamw8bit",
                  .device = Device::cuda(0)};
  in.gradient_checkpointing = true;
  const TrainingPlan lora{.network = "lora", .patterns = {"double_blocks.*", "single_blocks.*"}, .rank = 16};
  const MemoryEstimate bf16 = flux::estimate_flux_memory(flux::FluxConfig{}, lora, in);
  in.float8 = true;
  const MemoryEstimate float8 = flux::estimate_flux_memory(flux::FluxConfig{}, lora, in);
  std::printf("Flux.1-dev LoRA r16, float8 base: %s\n", describe(float8).c_str());
  int64_t previous = float8.total;
  for (int64_t n : {8, 16, 28, 38}) {
    in.blocks_to_swap = n;
    const MemoryEstimate swapped = flux::estimate_flux_memory(flux::FluxConfig{}, lora, in);
    std::printf("Flux.1-dev LoRA r16, float8 base, %2lld blocks swapped: total %s, %s of weights in host memory\n",
                static_cast<long long>(n), format_bytes(swapped.total).c_str(),
                format_bytes(swapped.swapped_weights).c_str());
    EXPECT_LT(swapped.total, previous) << n;  // the last blocks are single blocks: each swapped one saves
    previous = swapped.total;
  }
  // The block Linears (11.8 of the 11.9 B parameters) drop from 2 bytes to 1 plus a scale per row.
  EXPECT_LT(float8.frozen_weights, bf16.frozen_weights * 52 / 100);
  EXPECT_GT(float8.frozen_weights, bf16.frozen_weights * 48 / 100);
  EXPECT_LT(float8.total, int64_t{24} * 1000 * 1000 * 1000);  // a 24 GB card, batch 1 at 1024²
  EXPECT_GT(bf16.total, int64_t{24} * 1000 * 1000 * 1000);
}

// docs/distributed.md "Sharded weights", the table on paper: full-size Flux.1-dev and Qwen-Image LoRA r16 at 1024²
// (batch 1, bf16, adamw8bit, checkpointing, on GPUs) per rank with distributed.shard: weights on 1, 2, 4 and 8 ranks,
// bf16 and float8 bases, and the bytes each rank receives per step for the blocks' gathers (2·(N−1)/N of the packed
// block weights). The weights term falls as 1/N; what stays per rank is the embedders, the adapters and the
// activations.
TEST(MemoryEstimate, FullSizeShardedWeights) {
  MemoryInputs flux_in{.batch_size = 1, .latent_height = 128, .latent_width = 128, .text_length = 512,
                       .text_dim = 4096, .latent_channels = 16, .pooled_dim = 768, .compute_dtype = DType::BF16,
                       .gradient_checkpointing = true, .optimizer = "adamw8bit", .device = Device::cuda(0)};
  MemoryInputs qwen_in = flux_in;
  qwen_in.text_dim = 3584, qwen_in.text_length = 256, qwen_in.pooled_dim = 0;
  const TrainingPlan flux_lora{.network = "lora", .patterns = {"double_blocks.*", "single_blocks.*"}, .rank = 16};
  const TrainingPlan qwen_lora{.network = "lora", .patterns = {"transformer_blocks.*"}, .rank = 16};
  for (const std::string model : {"Flux.1-dev", "Qwen-Image"}) {
    for (bool float8 : {false, true}) {
      int64_t previous_weights = 0;
      for (int world : {1, 2, 4, 8}) {
        MemoryInputs in = model == "Flux.1-dev" ? flux_in : qwen_in;
        in.float8 = float8, in.world_size = world, in.shard_weights = true, in.shard_optimizer = world > 1;
        const MemoryEstimate m = model == "Flux.1-dev"
                                     ? flux::estimate_flux_memory(flux::FluxConfig{}, flux_lora, in)
                                     : qwenimage::estimate_qwenimage_memory(qwenimage::QwenImageConfig{}, qwen_lora, in);
        const int64_t gathered = 2 * (m.sharded_weights - m.sharded_weights / world);
        std::printf("%s LoRA r16 %s base, %d rank%s: %s per rank (weights %s + gathered-block buffers %s); %s of "
                    "%s block weights received per step\n",
                    model.c_str(), float8 ? "float8" : "bf16", world, world == 1 ? "" : "s",
                    format_bytes(m.total).c_str(), format_bytes(m.frozen_weights).c_str(),
                    format_bytes(m.swap_buffers).c_str(), format_bytes(gathered).c_str(),
                    format_bytes(m.sharded_weights).c_str());
        EXPECT_EQ(m.shard_ranks, world);
        if (previous_weights > 0) {
          EXPECT_LT(m.frozen_weights, previous_weights * 55 / 100) << model << " " << world;  // about half per doubling
          EXPECT_GT(m.frozen_weights, previous_weights * 45 / 100) << model << " " << world;
        }
        previous_weights = m.frozen_weights;
        if (model == "Flux.1-dev" && !float8 && world == 2) {
          EXPECT_LT(m.total, int64_t{24} * 1000 * 1000 * 1000) << "Flux.1-dev LoRA, bf16, on 2 x 24 GB";
        }
        if (model == "Qwen-Image" && float8 && world == 2) {
          EXPECT_LT(m.total, int64_t{24} * 1000 * 1000 * 1000) << "Qwen-Image LoRA, float8, on 2 x 24 GB";
        }
      }
    }
  }
}

// Full-size FLUX.2 without weights, as `wick train --dry-run` estimates it: 1024² (64 x 64 = 4,096 image tokens of 128
// patchified channels) with 512 text rows, batch 1, LoRA rank 16 on every Linear of the blocks, bf16, adamw8bit,
// checkpointing, on a GPU. dev (32.2 B parameters) on one 24 GB card (a float8 base and the last blocks swapped), and
// sharded over 2 and 4 ranks; klein 9B and 4B, bf16 and float8, against 12 / 16 / 24 GB cards.
TEST(MemoryEstimate, FullSizeFlux2Lora) {
  MemoryInputs in{.batch_size = 1, .latent_height = 64, .latent_width = 64, .text_length = 512, .text_dim = 15360,
                  .latent_channels = 128, .pooled_dim = 0, .compute_dtype = DType::BF16,
                  .gradient_checkpointing = true, .optimizer = "adamw8bit", .device = Device::cuda(0)};
  const int64_t gb = int64_t{1000} * 1000 * 1000;
  const flux2::Flux2Config dev;
  const TrainingPlan lora{.network = "lora", .patterns = {"double_blocks.*", "single_blocks.*"}, .rank = 16};
  const MemoryEstimate bf16 = flux2::estimate_flux2_memory(dev, lora, in);
  std::printf("FLUX.2-dev LoRA r16, bf16 base: %s\n", describe(bf16).c_str());
  int64_t n_parameters = 0;
  for (const auto& [param, shape] : flux2::parameter_shapes(dev)) n_parameters += numel(shape);
  EXPECT_EQ(bf16.frozen_weights, 2 * n_parameters);  // 64.4 GB
  // 16 x (in + out) per Linear: per double block two streams of qkv (h -> 3h), proj (h -> h), mlp.0 (h -> 6h),
  // mlp.2 (3h -> h); per single block linear1 (h -> 9h) and linear2 (4h -> h).
  const int64_t h = 6144;
  EXPECT_EQ(bf16.n_trainable, 16 * (8 * 2 * ((h + 3 * h) + (h + h) + (h + 6 * h) + (3 * h + h)) +
                                    48 * ((h + 9 * h) + (4 * h + h))));
  in.float8 = true;
  const MemoryEstimate float8 = flux2::estimate_flux2_memory(dev, lora, in);
  std::printf("FLUX.2-dev LoRA r16, float8 base: %s\n", describe(float8).c_str());
  EXPECT_LT(float8.frozen_weights, bf16.frozen_weights * 52 / 100);
  EXPECT_GT(float8.total, 24 * gb);  // float8 alone does not fit a 24 GB card
  int64_t previous = float8.total, fits_at = -1;
  for (int64_t n : {8, 16, 24, 32, 40}) {
    in.blocks_to_swap = n;
    const MemoryEstimate swapped = flux2::estimate_flux2_memory(dev, lora, in);
    std::printf("FLUX.2-dev LoRA r16, float8 base, %2lld blocks swapped: total %s, %s of weights in host memory\n",
                static_cast<long long>(n), format_bytes(swapped.total).c_str(),
                format_bytes(swapped.swapped_weights).c_str());
    EXPECT_LT(swapped.total, previous) << n;
    previous = swapped.total;
    if (fits_at < 0 && swapped.total < 24 * gb) fits_at = n;
  }
  EXPECT_GT(fits_at, 0) << "FLUX.2-dev LoRA with a float8 base fits one 24 GB card with enough blocks swapped";
  in.blocks_to_swap = 0;
  // The blocks' weights are sharded; the embedders, the three shared modulations (0.57 B parameters) and the final
  // layer stay whole on every rank.
  int64_t block_parameters = 0;
  for (const auto& [param, shape] : flux2::parameter_shapes(dev))
    if (param.rfind("double_blocks.", 0) == 0 || param.rfind("single_blocks.", 0) == 0) block_parameters += numel(shape);
  for (int world : {2, 4}) {
    for (bool float8_base : {false, true}) {
      MemoryInputs sharded = in;
      sharded.float8 = float8_base, sharded.world_size = world, sharded.shard_weights = true;
      sharded.shard_optimizer = true;
      const MemoryEstimate m = flux2::estimate_flux2_memory(dev, lora, sharded);
      std::printf("FLUX.2-dev LoRA r16, %s base, weights sharded on %d ranks: %s per rank (weights %s)\n",
                  float8_base ? "float8" : "bf16", world, format_bytes(m.total).c_str(),
                  format_bytes(m.frozen_weights).c_str());
      EXPECT_EQ(m.shard_ranks, world);
      const int64_t whole = (float8_base ? float8 : bf16).frozen_weights;
      const int64_t bytes_per_parameter = float8_base ? 1 : 2;
      const int64_t replicated = whole - bytes_per_parameter * block_parameters;
      EXPECT_LT(m.frozen_weights, (replicated + bytes_per_parameter * block_parameters / world) * 105 / 100);
    }
  }
  // klein: Qwen3's stacked features (3 x 2560 / 3 x 4096 wide), no guidance_in.
  for (const auto& [label, config] : {std::pair<const char*, flux2::Flux2Config>{"klein 4B", flux2::klein_4b_config()},
                                      {"klein 9B", flux2::klein_9b_config()}}) {
    for (bool float8_base : {false, true}) {
      MemoryInputs k = in;
      k.text_dim = config.context_dim, k.float8 = float8_base;
      const MemoryEstimate m = flux2::estimate_flux2_memory(config, lora, k);
      std::printf("FLUX.2 %s LoRA r16, %s base: %s\n", label, float8_base ? "float8" : "bf16", describe(m).c_str());
      // float8 holds the blocks' Linears (one byte per weight and a scale per row); the rest stays bf16.
      int64_t blocks = 0, rest = 0;
      for (const auto& [param, shape] : flux2::parameter_shapes(config))
        (param.rfind("double_blocks.", 0) == 0 || param.rfind("single_blocks.", 0) == 0 ? blocks : rest) +=
            numel(shape);
      if (float8_base) {
        EXPECT_GE(m.frozen_weights, blocks + 2 * rest) << label;
        EXPECT_LT(m.frozen_weights, (blocks + 2 * rest) * 102 / 100) << label;
      } else {
        EXPECT_EQ(m.frozen_weights, 2 * (blocks + rest)) << label;
      }
    }
  }
}

// Full-size Qwen-Image (20.4 B parameters) without weights, as `wick train --dry-run` estimates it for
// configs/qwen_image_lora.yaml: 1024² (4,096 image tokens) with 256 caption rows, batch 1, LoRA rank 16 on the default
// preset (every Linear of the 60 blocks, modulation included: 14 per block), bf16, adamw8bit, checkpointing, on a GPU;
// then a float8 base, the last N blocks swapped, and 2 and 4 ranks sharding the frozen weights. musubi-tuner's
// docs/qwen_image.md: 41 GB in bf16, about 24 GB with float8 and 16 blocks swapped.
TEST(MemoryEstimate, FullSizeQwenImageLora) {
  MemoryInputs in{.batch_size = 1, .latent_height = 128, .latent_width = 128, .text_length = 256, .text_dim = 3584,
                  .latent_channels = 16, .pooled_dim = 0, .compute_dtype = DType::BF16,
                  .gradient_checkpointing = true, .optimizer = "adamw8bit", .device = Device::cuda(0)};
  const qwenimage::QwenImageConfig released;
  const TrainingPlan lora{.network = "lora", .patterns = {"transformer_blocks.*"}, .rank = 16};
  const MemoryEstimate bf16 = qwenimage::estimate_qwenimage_memory(released, lora, in);
  std::printf("Qwen-Image LoRA r16, bf16 base: %s\n", describe(bf16).c_str());
  int64_t n_parameters = 0;
  for (const auto& [param, shape] : qwenimage::parameter_shapes(released)) n_parameters += numel(shape);
  EXPECT_NEAR(static_cast<double>(n_parameters), 20.43e9, 0.01e9);
  EXPECT_EQ(bf16.frozen_weights, 2 * n_parameters);  // 40.9 GB
  // 16 x (in + out) per Linear: q, k, v, out and their text twins (3072 -> 3072), the modulations (3072 -> 6 x 3072),
  // the two MLPs (3072 -> 12288 -> 3072).
  const int64_t d = 3072;
  EXPECT_EQ(bf16.n_trainable, 60 * 16 * (8 * (d + d) + 2 * (d + 6 * d) + 2 * ((d + 4 * d) + (4 * d + d))));
  EXPECT_GT(bf16.total, int64_t{41} * 1000 * 1000 * 1000);
  in.float8 = true;
  const MemoryEstimate float8 = qwenimage::estimate_qwenimage_memory(released, lora, in);
  std::printf("Qwen-Image LoRA r16, float8 base: %s\n", describe(float8).c_str());
  EXPECT_LT(float8.frozen_weights, bf16.frozen_weights * 52 / 100);
  EXPECT_GT(float8.total, int64_t{24} * 1000 * 1000 * 1000);  // float8 alone does not fit a 24 GB card
  int64_t previous = float8.total;
  for (int64_t n : {8, 16, 24, 32}) {
    in.blocks_to_swap = n;
    const MemoryEstimate swapped = qwenimage::estimate_qwenimage_memory(released, lora, in);
    std::printf("Qwen-Image LoRA r16, float8 base, %2lld blocks swapped: total %s, %s of weights in host memory\n",
                static_cast<long long>(n), format_bytes(swapped.total).c_str(),
                format_bytes(swapped.swapped_weights).c_str());
    EXPECT_LT(swapped.total, previous) << n;
    previous = swapped.total;
    if (n == 16) {
      EXPECT_LT(swapped.total, int64_t{24} * 1000 * 1000 * 1000) << "musubi-tuner's 24 GB setting";
    }
  }
  in.blocks_to_swap = 0;
  for (int world : {2, 4}) {
    for (bool float8_base : {false, true}) {
      MemoryInputs sharded = in;
      sharded.float8 = float8_base, sharded.world_size = world, sharded.shard_weights = true;
      sharded.shard_optimizer = true;
      const MemoryEstimate m = qwenimage::estimate_qwenimage_memory(released, lora, sharded);
      std::printf("Qwen-Image LoRA r16, %s base, weights sharded on %d ranks: %s per rank\n",
                  float8_base ? "float8" : "bf16", world, format_bytes(m.total).c_str());
      EXPECT_EQ(m.shard_ranks, world);
      EXPECT_LT(m.frozen_weights, (float8_base ? float8 : bf16).frozen_weights / world * 105 / 100);
      if (world == 4 && !float8_base) {
        EXPECT_LT(m.total, int64_t{24} * 1000 * 1000 * 1000) << "bf16 on 4 x 24 GB";
      }
    }
  }
}

// Full-size SD3.5 Large and Medium without weights (docs/training.md "Memory"): 1024² (4,096 image tokens) with
// 333 text tokens (77 CLIP + 256 T5), batch 1, LoRA rank 16 on every Linear of the joint blocks (sd3's default
// preset), bf16, adamw8bit, on a GPU. Large's bf16 weights alone are 16.3 GB (8.15 B parameters with pos_embed);
// Medium's 4.9 GB.
TEST(MemoryEstimate, FullSizeSd35Lora) {
  MemoryInputs in{.batch_size = 1, .latent_height = 128, .latent_width = 128, .text_length = 333, .text_dim = 4096,
                  .latent_channels = 16, .pooled_dim = 2048, .compute_dtype = DType::BF16, .optimizer = "adamw8bit",
                  .device = Device::cuda(0)};
  const TrainingPlan lora{.network = "lora", .patterns = {"joint_blocks.*"}, .rank = 16};
  const std::vector<std::pair<std::string, sd3::Sd3Config>> variants = {{"SD3.5 Large", sd3::Sd3Config::large()},
                                                                        {"SD3.5 Medium", sd3::Sd3Config::medium()}};
  for (const auto& [name, config] : variants) {
    SCOPED_TRACE(name);
    in.gradient_checkpointing = true;
    const MemoryEstimate on = sd3::estimate_sd3_memory(config, lora, in);
    in.gradient_checkpointing = false;
    const MemoryEstimate off = sd3::estimate_sd3_memory(config, lora, in);
    in.gradient_checkpointing = true;
    const MemoryEstimate full = sd3::estimate_sd3_memory(config, {.network = "full"}, in);
    std::printf("%s LoRA r16, checkpointing on:  %s\n", name.c_str(), describe(on).c_str());
    std::printf("%s LoRA r16, checkpointing off: %s\n", name.c_str(), describe(off).c_str());
    std::printf("%s full, checkpointing on:      %s\n", name.c_str(), describe(full).c_str());
    int64_t n_parameters = 0;
    for (const auto& [param, shape] : sd3::parameter_shapes(config)) n_parameters += numel(shape);
    EXPECT_EQ(on.frozen_weights, 2 * n_parameters);
    EXPECT_LT(on.total, int64_t{80} * 1000 * 1000 * 1000);
    EXPECT_GT(on.total, on.frozen_weights);
    EXPECT_EQ(on.total_other, off.total);
    EXPECT_GT(off.activations, 5 * on.activations);
  }
  // LoRA r16 on every block Linear of Large: per block 16 x (in + out) over x (adaLN 6h, qkv 3h, proj, fc1 4h, fc2)
  // and context (the same; the last block's context has only its 2h adaLN and qkv).
  const MemoryEstimate large = sd3::estimate_sd3_memory(sd3::Sd3Config::large(), lora, in);
  const int64_t h = 2432;
  const int64_t stream = 16 * ((h + 6 * h) + (h + 3 * h) + (h + h) + (h + 4 * h) + (4 * h + h));
  const int64_t last_context = 16 * ((h + 2 * h) + (h + 3 * h));
  EXPECT_EQ(large.n_trainable, 38 * stream + 37 * stream + last_context);
}

// Full-size SD3.5 Large LoRA with the memory plan's options (docs/models.md "Float8 base, block swapping and the
// memory plan"): a float8 base (per-row scales on the joint blocks' Linears) and the last N of the 38 joint blocks'
// frozen weights in host memory; the inputs of FullSizeSd35Lora, checkpointing on.
TEST(MemoryEstimate, FullSizeSd35LargeLoraFloat8AndSwapping) {
  MemoryInputs in{.batch_size = 1, .latent_height = 128, .latent_width = 128, .text_length = 333, .text_dim = 4096,
                  .latent_channels = 16, .pooled_dim = 2048, .compute_dtype = DType::BF16, .optimizer = "adamw8bit",
                  .device = Device::cuda(0)};
  in.gradient_checkpointing = true;
  const TrainingPlan lora{.network = "lora", .patterns = {"joint_blocks.*"}, .rank = 16};
  const MemoryEstimate bf16 = sd3::estimate_sd3_memory(sd3::Sd3Config::large(), lora, in);
  in.float8 = true;
  const MemoryEstimate float8 = sd3::estimate_sd3_memory(sd3::Sd3Config::large(), lora, in);
  std::printf("SD3.5 Large LoRA r16, bf16 base:   %s\n", describe(bf16).c_str());
  std::printf("SD3.5 Large LoRA r16, float8 base: %s\n", describe(float8).c_str());
  int64_t previous = float8.total;
  for (int64_t n : {8, 16, 28, 38}) {
    in.blocks_to_swap = n;
    const MemoryEstimate swapped = sd3::estimate_sd3_memory(sd3::Sd3Config::large(), lora, in);
    std::printf("SD3.5 Large LoRA r16, float8 base, %2lld blocks swapped: total %s, %s of weights in host memory\n",
                static_cast<long long>(n), format_bytes(swapped.total).c_str(),
                format_bytes(swapped.swapped_weights).c_str());
    EXPECT_LT(swapped.total, previous) << n;  // the joint blocks are alike: each swapped one saves
    previous = swapped.total;
  }
  // The joint blocks' Linears (all but ~0.1 B of the 8.15 B parameters) drop from 2 bytes to 1 plus a scale per row.
  EXPECT_LT(float8.frozen_weights, bf16.frozen_weights * 52 / 100);
  EXPECT_GT(float8.frozen_weights, bf16.frozen_weights * 48 / 100);
  EXPECT_GT(float8.n_float8, int64_t{8} * 1000 * 1000 * 1000);
}

}  // namespace
}  // namespace wick

namespace wick {
namespace {

// Automatic accumulation for train.global_batch_size: the fewest pieces of a share that fit, each
// distinct largest piece tried once, with the accumulation the pieces imply.
TEST(MemoryEstimate, FewestShareSplits) {
  struct Case {
    int64_t share, accumulation, largest_fitting;  // fits when piece <= largest_fitting
    std::optional<int64_t> splits;
  };
  const std::vector<Case> cases = {{10, 1, 10, 1}, {10, 1, 9, 2},  {10, 1, 5, 2}, {10, 1, 4, 3},
                                   {10, 1, 3, 4},  {10, 2, 2, 5},  {10, 1, 1, 10}, {10, 1, 0, std::nullopt},
                                   {1, 1, 1, 1},   {7, 3, 3, 3}};
  for (const Case& c : cases) {
    std::vector<int64_t> pieces;
    const std::optional<int64_t> splits =
        fewest_share_splits(c.share, c.accumulation, [&](int64_t piece, int64_t accumulation) {
          pieces.push_back(piece);
          EXPECT_EQ(accumulation % c.accumulation, 0);
          EXPECT_EQ(piece, (c.share + accumulation / c.accumulation - 1) / (accumulation / c.accumulation));
          return piece <= c.largest_fitting;
        });
    EXPECT_EQ(splits, c.splits) << "share " << c.share << ", pieces up to " << c.largest_fitting;
    for (size_t i = 1; i < pieces.size(); ++i) EXPECT_LT(pieces[i], pieces[i - 1]) << "a piece size tried twice";
  }
}

TEST(MemoryEstimate, MemoryLimitFromEnvironment) {
  const std::vector<std::pair<std::string, int64_t>> sizes = {
      {"12345", 12345}, {"500MB", 500000000}, {"1.5GB", 1500000000}, {"16GiB", int64_t{16} << 30},
      {"64 kib", 65536}, {"2g", 2000000000}};
  for (const auto& [text, bytes] : sizes) {
    ::setenv("WICK_MEMORY_LIMIT", text.c_str(), 1);
    EXPECT_EQ(memory_limit_from_environment(), std::optional<int64_t>(bytes)) << text;
  }
  for (const char* bad : {"lots", "-5GB", "5 parsecs", "0", "1e30"}) {
    ::setenv("WICK_MEMORY_LIMIT", bad, 1);
    EXPECT_THROW(memory_limit_from_environment(), WickError) << bad;
  }
  ::setenv("WICK_MEMORY_LIMIT", "", 1);
  EXPECT_EQ(memory_limit_from_environment(), std::nullopt);
  ::unsetenv("WICK_MEMORY_LIMIT");
  EXPECT_EQ(memory_limit_from_environment(), std::nullopt);
}

}  // namespace
}  // namespace wick
