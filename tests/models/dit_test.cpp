// The small DiT: shapes, adaLN-Zero (zero output at init), gradients to every parameter, masked
// text tokens ignored, timestep conditioning, LoRA targets by pattern, and the quickstart size.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/rng_state.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_reduce.h"
#include "engine/init.h"
#include "models/dit/dit.h"
#include "models/nn/adapters.h"
#include "models/nn/position_table.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/random.h"
#include "runtime/memory.h"

namespace wick {
namespace {

using ::testing::ElementsAre;
using autograd::backward;
using autograd::GradientStore;

Tensor random_input(const Shape& shape, uint64_t seed, DType dtype = DType::F32) {
  return randn(shape, derive_stream(seed, 0, 0, RngPurpose::Test), dtype);
}

double max_abs(const Tensor& a) {
  double worst = 0;
  for (double v : a.to_vector<double>()) worst = std::max(worst, std::fabs(v));
  return worst;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

DiTConfig small_config() {
  return DiTConfig{.in_channels = 4, .input_size = 8, .patch_size = 2, .hidden_size = 32, .depth = 2,
                   .num_heads = 4, .mlp_ratio = 2.0, .text_dim = 16, .pooled_dim = 12};
}

struct Inputs {
  Tensor x, t, context, mask, pooled;
};

Inputs make_inputs(const DiTConfig& c, int64_t batch, int64_t n_text, uint64_t seed, DType dtype = DType::F32) {
  Inputs in;
  in.x = random_input({batch, c.in_channels, c.input_size, c.input_size}, seed, dtype);
  std::vector<float> ts;
  for (int64_t b = 0; b < batch; ++b) ts.push_back(0.1f + 0.8f * static_cast<float>(b) / static_cast<float>(batch));
  in.t = Tensor::from_vector<float>(ts, {batch}).to(dtype);
  in.context = random_input({batch, n_text, c.text_dim}, seed + 1, dtype);
  // Sample b keeps its first n_text - b % n_text tokens (at least one).
  std::vector<uint8_t> mask;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < n_text; ++j) mask.push_back(j < std::max<int64_t>(1, n_text - b) ? 1 : 0);
  in.mask = Tensor::from_vector<uint8_t>(mask, {batch, n_text});
  in.pooled = random_input({batch, c.pooled_dim}, seed + 2, dtype);
  return in;
}

// Gives every parameter that starts at zero (adaLN modulations, final linear) random values.
void perturb_zero_parameters(DiT& dit, uint64_t seed) {
  uint64_t k = 0;
  for (auto& [name, p] : dit.named_parameters()) {
    if (max_abs(p) == 0.0) copy_into(p, mul(random_input(p.shape(), seed + 100 + k++, p.dtype()), 0.2));
  }
}

Tensor run(DiT& dit, const Inputs& in) { return dit.forward(in.x, in.t, in.context, in.mask, in.pooled); }

TEST(DiT, OutputShapeEqualsInputAndParameterNames) {
  set_init_seed(1);
  DiTConfig c = small_config();
  DiT dit(c);
  Inputs in = make_inputs(c, 3, 5, 10);
  Tensor y = run(dit, in);
  EXPECT_EQ(y.shape(), in.x.shape());
  EXPECT_EQ(y.dtype(), DType::F32);
  std::vector<std::string> names;
  for (auto& [name, p] : dit.named_parameters()) names.push_back(name);
  for (const char* expected :
       {"x_embedder.proj.weight", "pos_embed", "t_embedder.linear_1.weight", "t_embedder.linear_2.bias",
        "y_embedder.linear_1.weight", "context_embedder.weight", "blocks.0.attn.q.weight", "blocks.0.attn.kv.weight",
        "blocks.1.attn.proj.bias", "blocks.1.mlp.fc1.weight", "blocks.1.mlp.fc2.weight",
        "blocks.0.adaLN_modulation.1.weight", "final_layer.linear.weight", "final_layer.adaLN_modulation.1.bias"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  EXPECT_THAT(dit.parameter("pos_embed").shape(), ElementsAre(1, 16, 32));
  EXPECT_THAT(dit.parameter("blocks.0.adaLN_modulation.1.weight").shape(), ElementsAre(6 * 32, 32));
  EXPECT_THAT(dit.parameter("final_layer.linear.weight").shape(), ElementsAre(2 * 2 * 4, 32));

  DiTConfig sigma = c;
  sigma.learn_sigma = true;
  DiT dit2(sigma);
  EXPECT_THAT(run(dit2, in).shape(), ElementsAre(3, 8, 8, 8));
}

TEST(DiT, ZeroAtInitUntilAFinalWeightIsSet) {
  set_init_seed(2);
  DiTConfig c = small_config();
  DiT dit(c);
  Inputs in = make_inputs(c, 2, 4, 20);
  EXPECT_EQ(max_abs(run(dit, in)), 0.0);
  Tensor w = dit.parameter("final_layer.linear.weight");
  copy_into(w.narrow(0, 3, 1).narrow(1, 5, 1), full({1, 1}, 0.5));
  Tensor y = run(dit, in);
  EXPECT_GT(max_abs(y), 0.1);
  // Only output feature 3 of each patch is non-zero: channel 0, patch offset (1, 1) -> odd rows/cols.
  std::vector<double> v = y.to_vector<double>();
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    int64_t col = i % 8, row = (i / 8) % 8, ch = (i / 64) % 4;
    if (!(ch == 0 && row % 2 == 1 && col % 2 == 1)) {
      ASSERT_EQ(v[static_cast<size_t>(i)], 0.0) << i;
    }
  }
}

TEST(DiT, GradientsReachEveryParameter) {
  set_init_seed(3);
  DiTConfig c = small_config();
  DiT dit(c);
  perturb_zero_parameters(dit, 30);
  Inputs in = make_inputs(c, 2, 4, 31);
  Tensor target = random_input(in.x.shape(), 32);
  Tensor loss = autograd::mean(autograd::square(autograd::sub(run(dit, in), target)));
  GradientStore grads;
  backward(loss, grads);
  auto params = dit.trainable_parameters();
  EXPECT_EQ(params.size(), dit.named_parameters().size());
  for (auto& [name, p] : params) {
    Tensor g = grads.get(p);
    ASSERT_TRUE(g.defined()) << name;
    EXPECT_THAT(g.shape(), ::testing::ContainerEq(p.shape())) << name;
    EXPECT_GT(max_abs(g), 0.0) << name;
    for (double v : g.to_vector<double>()) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

TEST(DiT, MaskedTextTokensDoNotAffectTheOutput) {
  set_init_seed(4);
  DiTConfig c = small_config();
  DiT dit(c);
  perturb_zero_parameters(dit, 40);
  Inputs in = make_inputs(c, 3, 5, 41);  // sample 2 keeps tokens 0..2; 3, 4 are masked
  Tensor y0 = run(dit, in);
  Inputs changed = in;
  changed.context = add(in.context, 0.0);  // a copy
  copy_into(changed.context.select(0, 2).narrow(0, 3, 2), random_input({2, c.text_dim}, 42));
  Tensor y1 = run(dit, changed);
  EXPECT_EQ(max_abs_diff(y0, y1), 0.0);
  // A kept token of the same sample does change it (the test can fail).
  copy_into(changed.context.select(0, 2).narrow(0, 0, 1), random_input({1, c.text_dim}, 43));
  Tensor y2 = run(dit, changed);
  EXPECT_GT(max_abs_diff(y0.select(0, 2), y2.select(0, 2)), 1e-4);
  EXPECT_EQ(max_abs_diff(y0.select(0, 0), y2.select(0, 0)), 0.0);  // other samples untouched
}

TEST(DiT, TimestepAndPooledChangeTheOutput) {
  set_init_seed(5);
  DiTConfig c = small_config();
  DiT dit(c);
  perturb_zero_parameters(dit, 50);
  Inputs in = make_inputs(c, 2, 4, 51);
  Tensor y0 = run(dit, in);
  Inputs later = in;
  later.t = Tensor::from_vector<float>({0.9f, 0.05f}, {2});
  EXPECT_GT(max_abs_diff(y0, run(dit, later)), 1e-3);
  Inputs other = in;
  other.pooled = random_input(in.pooled.shape(), 52);
  EXPECT_GT(max_abs_diff(y0, run(dit, other)), 1e-3);
  EXPECT_EQ(max_abs_diff(y0, run(dit, in)), 0.0);  // deterministic
}

TEST(DiT, Bf16ModelWorksInBf16AndTracksF32) {
  DiTConfig c = small_config();
  set_init_seed(9);
  DiT ref(c);
  perturb_zero_parameters(ref, 90);
  c.dtype = DType::BF16;
  set_init_seed(9);
  DiT dit(c);
  auto ref_params = ref.named_parameters();
  auto params = dit.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) copy_into(params[i].second, ref_params[i].second);
  Inputs in = make_inputs(c, 2, 4, 91);
  Inputs in16 = in;
  in16.x = in.x.to(DType::BF16);
  Tensor y = run(dit, in16);  // t, context, pooled stay f32: cast inside
  EXPECT_EQ(y.dtype(), DType::BF16);
  Tensor y32 = run(ref, in);
  EXPECT_LT(max_abs_diff(y.to(DType::F32), y32), 0.05 * std::max(1.0, max_abs(y32)));
  Tensor loss = autograd::mean(autograd::square(y));
  GradientStore grads;
  backward(loss, grads);
  EXPECT_TRUE(grads.get(dit.parameter("blocks.0.attn.kv.weight")).defined());
}

TEST(DiT, PositionTableIsTwoDimensionalSinCos) {
  std::vector<double> t = sincos_2d_table(8, 3);  // quarter 2: [sin w, sin w/100, cos w, cos w/100, (h ...)]
  auto at = [&](int64_t h, int64_t w, int64_t k) { return t[static_cast<size_t>((h * 3 + w) * 8 + k)]; };
  EXPECT_DOUBLE_EQ(at(1, 2, 0), std::sin(2.0));
  EXPECT_DOUBLE_EQ(at(1, 2, 1), std::sin(2.0 / 100.0));
  EXPECT_DOUBLE_EQ(at(1, 2, 2), std::cos(2.0));
  EXPECT_DOUBLE_EQ(at(1, 2, 4), std::sin(1.0));
  EXPECT_DOUBLE_EQ(at(1, 2, 7), std::cos(1.0 / 100.0));
  set_init_seed(6);
  DiT dit(small_config());
  std::vector<double> table = sincos_2d_table(32, 4), pos = dit.parameter("pos_embed").to_vector<double>();
  ASSERT_EQ(pos.size(), table.size());
  for (size_t i = 0; i < pos.size(); ++i) ASSERT_NEAR(pos[i], table[i], 1e-6) << i;
}

TEST(DiT, LoRAOnAttentionWrapsQKVAndProjOfEveryBlock) {
  set_init_seed(7);
  DiTConfig c = small_config();
  auto dit = std::make_shared<DiT>(c);
  nn::AdapterReport report = nn::apply_adapters(*dit, {.type = "lora", .patterns = {"blocks.*.attn.*"},
                                                        .options = {.rank = 4, .alpha = 4.0}});
  EXPECT_THAT(report.wrapped, ElementsAre("blocks.0.attn.q", "blocks.0.attn.kv", "blocks.0.attn.proj",
                                          "blocks.1.attn.q", "blocks.1.attn.kv", "blocks.1.attn.proj"));
  int64_t expected = 0;
  for (int64_t i = 0; i < 2; ++i) expected += 4 * (32 + 32) + 4 * (32 + 64) + 4 * (32 + 32);
  EXPECT_EQ(report.n_trainable, expected);
  EXPECT_EQ(dit->n_parameters(true), expected);
  // Still runs, and LoRA (zero-init up) leaves the output unchanged: zero at init.
  Inputs in = make_inputs(c, 2, 4, 70);
  EXPECT_EQ(max_abs(run(*dit, in)), 0.0);
}

// Forward + backward of a mean-squared loss; returns the gradients of every trainable parameter and
// of the context, and the peak of tensor bytes above those held before the forward.
struct PassResult {
  std::vector<std::vector<float>> grads;
  int64_t extra_peak_bytes = 0;
};

PassResult forward_backward(DiT& dit, const Inputs& in, const Tensor& target) {
  PassResult r;
  Tensor context = in.context.clone();
  autograd::set_requires_grad(context, true);
  release_cached_memory(Device::cpu());
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  reset_peak_memory(Device::cpu());
  GradientStore grads;
  {
    Tensor out = dit.forward(in.x, in.t, context, in.mask, in.pooled);
    Tensor loss = autograd::mean(autograd::square(autograd::sub(out, target)));
    backward(loss, grads);
  }
  r.extra_peak_bytes = memory_stats(Device::cpu()).peak_bytes - before;
  for (auto& [name, p] : dit.trainable_parameters()) r.grads.push_back(grads.get(p).to_vector<float>());
  r.grads.push_back(grads.get(context).to_vector<float>());
  return r;
}

TEST(DiT, GradientCheckpointingGivesTheSameGradientsBitwiseInLessMemory) {
  set_init_seed(9);
  DiTConfig c{.in_channels = 4, .input_size = 8, .patch_size = 2, .hidden_size = 64, .depth = 4, .num_heads = 4,
              .mlp_ratio = 4.0, .text_dim = 16, .pooled_dim = 12};
  DiT dit(c);
  perturb_zero_parameters(dit, 90);
  Inputs in = make_inputs(c, 8, 4, 91);
  Tensor target = random_input(in.x.shape(), 92);
  PassResult plain = forward_backward(dit, in, target);
  dit.set_gradient_checkpointing(true);
  PassResult checkpointed = forward_backward(dit, in, target);
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) EXPECT_EQ(plain.grads[i], checkpointed.grads[i]) << "gradient " << i;
  std::printf("DiT depth 4, batch 8: extra peak bytes %lld plain, %lld checkpointed\n",
              static_cast<long long>(plain.extra_peak_bytes), static_cast<long long>(checkpointed.extra_peak_bytes));
  EXPECT_LT(checkpointed.extra_peak_bytes, plain.extra_peak_bytes * 2 / 3);  // measured: 0.60
  // Without recording (sampling) the flag changes nothing.
  autograd::NoGradGuard no_grad;
  EXPECT_EQ(run(dit, in).to_vector<float>(), [&] {
    dit.set_gradient_checkpointing(false);
    return run(dit, in).to_vector<float>();
  }());
}

TEST(DiT, GradientCheckpointingReplaysLoraDropout) {
  set_init_seed(10);
  DiTConfig c = small_config();
  auto shared = std::make_shared<DiT>(c);
  DiT& dit = *shared;
  perturb_zero_parameters(dit, 100);
  nn::apply_adapters(dit, {.type = "lora", .patterns = {"blocks.*.attn.*", "blocks.*.mlp.*"},
                           .options = {.rank = 4, .alpha = 4.0, .dropout = 0.25}});
  for (auto& [name, p] : dit.trainable_parameters())  // lora_up starts at zero: give it values
    if (max_abs(p) == 0.0) copy_into(p, mul(random_input(p.shape(), 101, p.dtype()), 0.1));
  Inputs in = make_inputs(c, 4, 4, 102);
  Tensor target = random_input(in.x.shape(), 103);
  autograd::RngCursorGuard restore;
  // The shared stream only, then per-sample streams (as the trainer sets them: every LoRA input is
  // [B, ...], so each draw takes one row per sample).
  for (bool per_sample : {false, true}) {
    SCOPED_TRACE(per_sample ? "per-sample streams" : "shared stream");
    auto set_cursor = [&](uint64_t seed) {
      autograd::current_rng() = autograd::RngCursor{derive_stream(seed, 0, 0, RngPurpose::Dropout), 0};
      if (per_sample) autograd::set_sample_streams(autograd::per_sample_streams(seed, {3, 1, 4, 1}, 0, RngPurpose::Dropout));
    };
    dit.set_gradient_checkpointing(false);
    set_cursor(104);
    PassResult plain = forward_backward(dit, in, target);
    EXPECT_EQ(autograd::current_rng().offset == 0, per_sample);  // per sample: nothing from the shared stream
    dit.set_gradient_checkpointing(true);
    set_cursor(104);
    PassResult checkpointed = forward_backward(dit, in, target);
    ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i) EXPECT_EQ(plain.grads[i], checkpointed.grads[i]) << "gradient " << i;
    // The dropout is live: another cursor draws other masks and other gradients.
    set_cursor(105);
    EXPECT_NE(forward_backward(dit, in, target).grads, checkpointed.grads);
  }
}

TEST(DiT, SmallSizeParametersAndCpuStepTime) {
  set_init_seed(8);
  DiTConfig c{.in_channels = 4, .input_size = 14, .patch_size = 2, .hidden_size = 128, .depth = 4, .num_heads = 4,
              .mlp_ratio = 4.0, .text_dim = 64, .pooled_dim = 64};
  DiT dit(c);
  int64_t n = dit.n_parameters();
  std::printf("[ DiT      ] DiT (hidden 128, depth 4, heads 4, patch 2, 4x14x14, text 64): %lld parameters\n",
              static_cast<long long>(n));
  // Hand count: x_embedder 16*128+128, pos_embed 49*128, t_embedder 256*128+128 + 128*128+128,
  // y_embedder 64*128+128 + 128*128+128, context_embedder 64*128+128,
  // per block: q 128*128+128, kv 128*256+256, proj 128*128+128, mlp 128*512+512 + 512*128+128,
  // adaLN 128*768+768; final: linear 128*16+16, adaLN 128*256+256.
  int64_t block = (128 * 128 + 128) + (128 * 256 + 256) + (128 * 128 + 128) + (128 * 512 + 512) + (512 * 128 + 128) +
                  (128 * 768 + 768);
  int64_t expected = (16 * 128 + 128) + 49 * 128 + (256 * 128 + 128) + (128 * 128 + 128) + (64 * 128 + 128) +
                     (128 * 128 + 128) + (64 * 128 + 128) + 4 * block + (128 * 16 + 16) + (128 * 256 + 256);
  EXPECT_EQ(n, expected);
  perturb_zero_parameters(dit, 80);
  Inputs in = make_inputs(c, 64, 8, 81);
  Tensor target = random_input(in.x.shape(), 82);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    auto start = std::chrono::steady_clock::now();
    Tensor loss = autograd::mean(autograd::square(autograd::sub(run(dit, in), target)));
    GradientStore grads;
    backward(loss, grads);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, ms);
    ASSERT_TRUE(std::isfinite(loss.item()));
  }
  std::printf("[ DiT      ] forward+backward, batch 64, CPU f32: best of 3 %.1f ms\n", best);
}

}  // namespace
}  // namespace wick
