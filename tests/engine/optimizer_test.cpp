// Fused flat optimizers: quantization maps and one 8-bit AdamW step against bitsandbytes, 32-bit
// AdamW and SGD against torch.optim over 100 steps (fixtures from
// tests/reference/make_adamw8bit_fixtures.py), the non-finite rule, partial blocks against an
// independent float64 reference, state round trips, CUDA vs CPU, and a 500-step drift check.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_data.h"
#include "engine/optim/flat_optimizers.h"
#include "engine/optim/optimizer_math.h"
#include "engine/optim/quantization_maps.h"
#include "runtime/device.h"

namespace wick {
namespace {

using ::testing::HasSubstr;

// ---- fixtures: "name dtype count" then the values (f32 as IEEE bits in hex, u8 decimal) ----
class Fixture {
 public:
  explicit Fixture(const std::string& file) {
    std::string path = wick::testing::test_data_dir() + "/optim/" + file;
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open fixture " + path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream header(line);
      std::string name, dtype;
      int64_t count = 0;
      header >> name >> dtype >> count;
      std::vector<uint32_t> words;
      while (static_cast<int64_t>(words.size()) < count) {
        std::string word;
        in >> word;
        if (!in) throw std::runtime_error("fixture " + path + ": " + name + " is short");
        words.push_back(static_cast<uint32_t>(std::stoul(word, nullptr, dtype == "f32" ? 16 : 10)));
      }
      arrays_[name] = {dtype, words};
    }
  }
  std::vector<float> f32(const std::string& name) const {
    const auto& [dtype, words] = get(name, "f32");
    std::vector<float> out(words.size());
    std::memcpy(out.data(), words.data(), words.size() * sizeof(float));
    return out;
  }
  std::vector<uint8_t> u8(const std::string& name) const {
    const auto& [dtype, words] = get(name, "u8");
    return std::vector<uint8_t>(words.begin(), words.end());
  }

 private:
  const std::pair<std::string, std::vector<uint32_t>>& get(const std::string& name, const char* dtype) const {
    auto found = arrays_.find(name);
    if (found == arrays_.end() || found->second.first != dtype)
      throw std::runtime_error("fixture array " + name + " (" + dtype + ") not found");
    return found->second;
  }
  std::map<std::string, std::pair<std::string, std::vector<uint32_t>>> arrays_;
};

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

Tensor f32_tensor(const std::vector<float>& values, Device device = Device::cpu()) {
  return Tensor::from_vector<float>(values, {static_cast<int64_t>(values.size())}, device);
}
Tensor u8_tensor(const std::vector<uint8_t>& values, Device device = Device::cpu()) {
  return Tensor::from_vector<uint8_t>(values, {static_cast<int64_t>(values.size())}, device);
}

std::vector<float> random_vector(int64_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(n);
  for (auto& x : out) x = normal(rng) * scale;
  return out;
}

double max_abs(const std::vector<float>& x) {
  double out = 0.0;
  for (float v : x) out = std::max(out, std::fabs(static_cast<double>(v)));
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double out = 0.0;
  for (size_t i = 0; i < a.size(); ++i) out = std::max(out, std::fabs(double(a[i]) - double(b[i])));
  return out;
}

// ---- quantization maps ----

TEST(QuantizationMaps, EqualBitsandbytesCreateDynamicMapBitwise) {
  Fixture fixture("dynamic_maps.txt");
  std::vector<float> want_signed = fixture.f32("signed"), want_unsigned = fixture.f32("unsigned");
  ASSERT_EQ(want_signed.size(), 256u);
  ASSERT_EQ(want_unsigned.size(), 256u);
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(bits_of(signed_dynamic_map()[i]), bits_of(want_signed[i])) << "signed map index " << i;
    EXPECT_EQ(bits_of(unsigned_dynamic_map()[i]), bits_of(want_unsigned[i])) << "unsigned map index " << i;
  }
  EXPECT_EQ(signed_dynamic_map()[127], 0.0f);
  EXPECT_EQ(signed_dynamic_map()[255], 1.0f);
  EXPECT_NEAR(signed_dynamic_map()[0], -0.99297, 1e-5);
  EXPECT_EQ(unsigned_dynamic_map()[0], 0.0f);
  EXPECT_EQ(unsigned_dynamic_map()[255], 1.0f);
}

TEST(QuantizationMaps, RequantizeIsNearestCode) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int signed_map = 0; signed_map < 2; ++signed_map) {
    const float* map = signed_map ? signed_dynamic_map().data() : unsigned_dynamic_map().data();
    for (int trial = 0; trial < 20000; ++trial) {
      float x = uniform(rng);
      // Also probe tiny magnitudes, where the map is densest in relative terms.
      if (trial % 3 == 1) x *= 1e-4f;
      if (!signed_map) x = std::fabs(x);
      int code = optim_math::quantize_to_code(map, x, signed_map != 0);
      double best = std::numeric_limits<double>::infinity();
      for (int c = 0; c < 256; ++c) best = std::min(best, std::fabs(double(map[c]) - x));
      ASSERT_LE(std::fabs(double(map[code]) - x), best * (1 + 1e-6) + 1e-12) << "x " << x << " code " << code;
    }
  }
}

// The CUDA kernel's search over the breadth-first tree gives requantize's code for every value:
// the code is piecewise constant in x with breaks only at map entries and midpoints, so those,
// one ulp either side, the ends, zeros of both signs, out-of-range values and random values (at
// several absmax) cover every branch.
TEST(QuantizationMaps, TreeSearchEqualsRequantize) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int signed_map = 0; signed_map < 2; ++signed_map) {
    SCOPED_TRACE(signed_map ? "signed" : "unsigned");
    const float* map = signed_map ? signed_dynamic_map().data() : unsigned_dynamic_map().data();
    float tree[256] = {};
    std::vector<int> visits(256, 0);
    for (int t = 0; t < 255; ++t) {
      int index = optim_math::search_tree_map_index(t);
      ASSERT_TRUE(index >= 0 && index < 255) << "tree entry " << t;
      visits[index] += 1;
      tree[t] = map[index];
    }
    for (int i = 0; i < 255; ++i) ASSERT_EQ(visits[i], 1) << "map index " << i << " must sit once in the tree";
    std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 1e-30f, -1e-30f};
    for (int i = 0; i < 256; ++i) {
      float breaks[3] = {map[i], i < 255 ? (map[i] + map[i + 1]) * 0.5f : 1.0f, i > 0 ? (map[i - 1] + map[i]) * 0.5f : -1.0f};
      for (float b : breaks)
        for (float x : {b, std::nextafter(b, 2.0f), std::nextafter(b, -2.0f)}) {
          xs.push_back(x);
          xs.push_back(-x);
        }
    }
    for (int trial = 0; trial < 100000; ++trial) xs.push_back(uniform(rng) * (trial % 4 == 1 ? 1e-4f : 1.0f));
    int64_t checked = 0;
    for (float absmax : {1.0f, 0.0f, 0.37f, 3.5e-6f}) {
      for (float x : xs) {
        float value = absmax > 0.0f ? x * absmax : x;
        uint8_t want = optim_math::requantize(map, value, absmax, signed_map != 0);
        uint8_t got = optim_math::requantize_tree(tree, map[255], value, absmax, signed_map != 0);
        ASSERT_EQ(int(got), int(want)) << "value " << value << " (bits " << std::hex << bits_of(value) << std::dec
                                       << ") absmax " << absmax;
        ++checked;
      }
    }
    EXPECT_GT(checked, 400000);
  }
}

// ---- 8-bit AdamW against bitsandbytes' own implementation ----

std::vector<float> dequantize(const std::vector<uint8_t>& codes, const std::vector<float>& absmax, bool signed_map) {
  const float* map = signed_map ? signed_dynamic_map().data() : unsigned_dynamic_map().data();
  std::vector<float> out(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) out[i] = map[codes[i]] * absmax[i / 256];
  return out;
}

TEST(AdamW8bit, OneStepMatchesBitsandbytes) {
  Fixture fx("adamw8bit_step.txt");
  std::vector<float> h = fx.f32("hyper_lr_beta1_beta2_eps_wd_step");
  AdamWHyper hyper{h[0], h[1], h[2], h[3], h[4], static_cast<int64_t>(h[5])};
  std::vector<float> p_before = fx.f32("p");
  Tensor p = f32_tensor(p_before), g = f32_tensor(fx.f32("g"));
  Tensor m_codes = u8_tensor(fx.u8("m_codes")), v_codes = u8_tensor(fx.u8("v_codes"));
  Tensor absmax_m = f32_tensor(fx.f32("absmax_m")), absmax_v = f32_tensor(fx.f32("absmax_v"));
  ASSERT_EQ(p.numel(), 1000);
  ASSERT_EQ(absmax_m.numel(), 4);
  EXPECT_EQ(adamw8bit_step(p, g, m_codes, v_codes, absmax_m, absmax_v, hyper), 0);

  std::vector<float> p_ours = p.to_vector<float>(), p_bnb = fx.f32("p_after");
  double mean_abs_diff = 0.0, mean_abs_step = 0.0;
  for (size_t i = 0; i < p_ours.size(); ++i) {
    mean_abs_diff += std::fabs(double(p_ours[i]) - p_bnb[i]);
    mean_abs_step += std::fabs(double(p_bnb[i]) - p_before[i]);
  }
  mean_abs_diff /= p_ours.size();
  mean_abs_step /= p_ours.size();
  EXPECT_LT(mean_abs_diff, 6e-5);  // bitsandbytes' own criterion (f32)
  EXPECT_GT(mean_abs_step, 1e-4);  // the step did move the parameters

  // States: codes equal or one apart except a few; dequantized states isclose(atol 3e-3, rtol 1e-3)
  // with at most 20 misses, as bitsandbytes' test.
  for (int which = 0; which < 2; ++which) {
    bool is_m = which == 0;
    std::vector<uint8_t> ours = (is_m ? m_codes : v_codes).to_vector<uint8_t>();
    std::vector<uint8_t> want = fx.u8(is_m ? "m_codes_after" : "v_codes_after");
    std::vector<float> ours_absmax = (is_m ? absmax_m : absmax_v).to_vector<float>();
    std::vector<float> want_absmax = fx.f32(is_m ? "absmax_m_after" : "absmax_v_after");
    int n_equal = 0, n_off_by_one = 0, n_further = 0, n_state_misses = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      int d = std::abs(int(ours[i]) - int(want[i]));
      (d == 0 ? n_equal : d == 1 ? n_off_by_one : n_further) += 1;
    }
    std::vector<float> s_ours = dequantize(ours, ours_absmax, is_m), s_want = dequantize(want, want_absmax, is_m);
    for (size_t i = 0; i < s_ours.size(); ++i)
      if (std::fabs(double(s_ours[i]) - s_want[i]) > 3e-3 + 1e-3 * std::fabs(double(s_want[i]))) ++n_state_misses;
    for (size_t b = 0; b < ours_absmax.size(); ++b)
      EXPECT_NEAR(ours_absmax[b], want_absmax[b], 1e-5 * want_absmax[b] + 1e-30) << (is_m ? "m" : "v") << " block " << b;
    std::printf("[adamw8bit vs bitsandbytes] %s codes: %d equal, %d off by one, %d further; state misses %d; "
                "mean |dp| %.3g (mean step %.3g)\n",
                is_m ? "m" : "v", n_equal, n_off_by_one, n_further, n_state_misses, mean_abs_diff, mean_abs_step);
    EXPECT_LE(n_further, 3);
    EXPECT_LE(n_off_by_one, 20);
    EXPECT_LE(n_state_misses, 20);
  }
}

// ---- 32-bit AdamW and SGD against torch.optim over 100 steps ----

struct TorchProblem {
  std::vector<float> p0, c, t;
};

TorchProblem load_torch_problem(const Fixture& fx) { return {fx.f32("p0"), fx.f32("c"), fx.f32("t")}; }

// g = (p - t) * c, in f32 as torch computes it.
void quadratic_grad(const Tensor& p, const Tensor& g, const TorchProblem& problem) {
  const float* pp = p.data_as<float>();
  float* gp = g.data_as<float>();
  for (size_t i = 0; i < problem.c.size(); ++i) gp[i] = (pp[i] - problem.t[i]) * problem.c[i];
}

double relative_to_max(const std::vector<float>& ours, const std::vector<float>& want) {
  return max_abs_diff(ours, want) / max_abs(want);
}

TEST(AdamW32, MatchesTorchAdamWOver100Steps) {
  Fixture fx("torch_reference.txt");
  TorchProblem problem = load_torch_problem(fx);
  std::vector<float> h = fx.f32("adamw_lr_beta1_beta2_eps_wd");
  AdamWHyper hyper{h[0], h[1], h[2], h[3], h[4], 1};
  int64_t n = static_cast<int64_t>(problem.p0.size());
  Tensor p = f32_tensor(problem.p0), g = Tensor::empty({n}, DType::F32);
  AdamWState state = AdamWState::zeros(n, false, Device::cpu());
  for (int64_t t = 1; t <= 100; ++t) {
    quadratic_grad(p, g, problem);
    hyper.step = t;
    ASSERT_EQ(adamw_step(p, g, state, hyper), 0);
  }
  double rel = relative_to_max(p.to_vector<float>(), fx.f32("p_adamw_100"));
  std::printf("[adamw vs torch.optim.AdamW, 100 steps] max |dp| / max |p| = %.3g\n", rel);
  EXPECT_LE(rel, 1e-6);
}

void run_sgd_against_torch(bool nesterov, const char* want_name) {
  Fixture fx("torch_reference.txt");
  TorchProblem problem = load_torch_problem(fx);
  std::vector<float> h = fx.f32("sgd_lr_momentum_wd");
  SgdHyper hyper{h[0], h[1], 0.0f, h[2], nesterov, 1};
  int64_t n = static_cast<int64_t>(problem.p0.size());
  Tensor p = f32_tensor(problem.p0), g = Tensor::empty({n}, DType::F32), buf = Tensor::empty({n}, DType::F32);
  for (int64_t t = 1; t <= 100; ++t) {
    quadratic_grad(p, g, problem);
    hyper.step = t;
    ASSERT_EQ(sgd_step(p, g, buf, hyper), 0);
  }
  double rel = relative_to_max(p.to_vector<float>(), fx.f32(want_name));
  std::printf("[sgd %s vs torch.optim.SGD, 100 steps] max |dp| / max |p| = %.3g\n",
              nesterov ? "nesterov" : "momentum", rel);
  EXPECT_LE(rel, 1e-6);
}

TEST(Sgd, MomentumMatchesTorchSgdOver100Steps) { run_sgd_against_torch(false, "p_sgd_momentum_100"); }
TEST(Sgd, NesterovMatchesTorchSgdOver100Steps) { run_sgd_against_torch(true, "p_sgd_nesterov_100"); }

TEST(Sgd, PlainStepWithoutMomentumBuffer) {
  Tensor p = f32_tensor({1.0f, -2.0f}), g = f32_tensor({0.5f, 0.25f});
  SgdHyper hyper{0.1f, 0.0f, 0.0f, 0.0f, false, 1};
  EXPECT_EQ(sgd_step(p, g, Tensor(), hyper), 0);
  EXPECT_THAT(p.to_vector<float>(), ::testing::ElementsAre(0.95f, -2.025f));
}

// ---- an independent float64 reference of the 8-bit step (linear-scan nearest code) ----

struct Reference8bit {
  std::vector<double> p;
  std::vector<uint8_t> m_codes, v_codes;
  std::vector<double> absmax_m, absmax_v;
};

int nearest_code_linear(const std::array<float, 256>& map, double x) {
  int best = 0;
  for (int c = 1; c < 256; ++c)
    if (std::fabs(map[c] - x) < std::fabs(map[best] - x)) best = c;
  return best;
}

void reference_adamw8bit_step(Reference8bit& r, const std::vector<float>& g, const AdamWHyper& h) {
  const auto& sm = signed_dynamic_map();
  const auto& um = unsigned_dynamic_map();
  int64_t n = static_cast<int64_t>(g.size());
  double bias1 = 1.0 - std::pow(double(h.beta1), double(h.step));
  double bias2_sqrt = std::sqrt(1.0 - std::pow(double(h.beta2), double(h.step)));
  for (int64_t base = 0; base < n; base += 256) {
    int64_t count = std::min<int64_t>(256, n - base), b = base / 256;
    std::vector<double> m(count), v(count);
    double new_absmax_m = 0, new_absmax_v = 0;
    for (int64_t j = 0; j < count; ++j) {
      int64_t i = base + j;
      double mm = sm[r.m_codes[i]] * r.absmax_m[b], vv = um[r.v_codes[i]] * r.absmax_v[b];
      if (std::isfinite(g[i])) {
        mm = h.beta1 * mm + (1.0 - h.beta1) * g[i];
        vv = h.beta2 * vv + (1.0 - h.beta2) * double(g[i]) * g[i];
        r.p[i] -= h.lr * bias2_sqrt / bias1 * mm / (std::sqrt(vv) + h.eps * bias2_sqrt);
        r.p[i] *= 1.0 - double(h.lr) * h.weight_decay;
      } else {
        mm = vv = 0.0;
      }
      m[j] = mm;
      v[j] = vv;
      new_absmax_m = std::max(new_absmax_m, std::fabs(mm));
      new_absmax_v = std::max(new_absmax_v, vv);
    }
    r.absmax_m[b] = new_absmax_m;
    r.absmax_v[b] = new_absmax_v;
    for (int64_t j = 0; j < count; ++j) {
      r.m_codes[base + j] = static_cast<uint8_t>(nearest_code_linear(sm, new_absmax_m > 0 ? m[j] / new_absmax_m : 0.0));
      r.v_codes[base + j] = static_cast<uint8_t>(nearest_code_linear(um, new_absmax_v > 0 ? v[j] / new_absmax_v : 0.0));
    }
  }
}

TEST(AdamW8bit, PartialLastBlockMatchesFloat64Reference) {
  const int64_t n = 3 * 256 + 17;  // the last block holds 17 elements
  ASSERT_EQ(n_quantization_blocks(n), 4);
  std::vector<float> p0 = random_vector(n, 0.5f, 11);
  Reference8bit ref{std::vector<double>(p0.begin(), p0.end()), std::vector<uint8_t>(n, 0), std::vector<uint8_t>(n, 0),
                    std::vector<double>(4, 0.0), std::vector<double>(4, 0.0)};
  Tensor p = f32_tensor(p0);
  AdamWState state = AdamWState::zeros(n, true, Device::cpu());
  AdamWHyper hyper;
  int n_code_mismatches = 0, n_codes_far = 0;
  for (int64_t t = 1; t <= 5; ++t) {
    std::vector<float> g = random_vector(n, 0.1f, 100 + static_cast<uint32_t>(t));
    hyper.step = t;
    adamw_step(p, f32_tensor(g), state, hyper);
    reference_adamw8bit_step(ref, g, hyper);
    std::vector<uint8_t> mc = state.m_codes.to_vector<uint8_t>(), vc = state.v_codes.to_vector<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      int dm = std::abs(int(mc[i]) - int(ref.m_codes[i])), dv = std::abs(int(vc[i]) - int(ref.v_codes[i]));
      n_code_mismatches += (dm != 0) + (dv != 0);
      n_codes_far += (dm > 1) + (dv > 1);
      // Resync the reference's codes with ours (as bitsandbytes' test does), so the comparison
      // measures one step at a time.
      ref.m_codes[i] = mc[i];
      ref.v_codes[i] = vc[i];
    }
    std::vector<float> am = state.absmax_m.to_vector<float>(), av = state.absmax_v.to_vector<float>();
    for (int b = 0; b < 4; ++b) {
      EXPECT_NEAR(am[b], ref.absmax_m[b], 1e-6 * ref.absmax_m[b]) << "step " << t << " block " << b;
      EXPECT_NEAR(av[b], ref.absmax_v[b], 1e-6 * ref.absmax_v[b]) << "step " << t << " block " << b;
      ref.absmax_m[b] = am[b];
      ref.absmax_v[b] = av[b];
    }
  }
  std::vector<float> p_ours = p.to_vector<float>();
  std::vector<float> p_ref(ref.p.begin(), ref.p.end());
  double rel = relative_to_max(p_ours, p_ref);
  std::printf("[adamw8bit vs float64 reference, n=%lld, 5 steps] max |dp|/max|p| %.3g, code mismatches %d "
              "(of %lld), further than one code %d\n",
              static_cast<long long>(n), rel, n_code_mismatches, static_cast<long long>(2 * 5 * n), n_codes_far);
  EXPECT_LE(rel, 1e-6);
  EXPECT_EQ(n_codes_far, 0);
  EXPECT_LE(n_code_mismatches, 10);
  // The last block's elements were all updated.
  for (int64_t i = 3 * 256; i < n; ++i) EXPECT_NE(p_ours[i], p0[i]) << i;
}

TEST(AdamW8bit, BlocksAreIndependentIncludingThePartialOne) {
  const int64_t n = 2 * 256 + 100;
  std::vector<float> p0 = random_vector(n, 1.0f, 3), g = random_vector(n, 0.3f, 4);
  Tensor p = f32_tensor(p0);
  AdamWState whole = AdamWState::zeros(n, true, Device::cpu());
  AdamWHyper hyper;
  adamw_step(p, f32_tensor(g), whole, hyper);
  // The partial block alone, as its own 100-element tensor, must give the same bits.
  std::vector<float> tail_p(p0.begin() + 512, p0.end()), tail_g(g.begin() + 512, g.end());
  Tensor tp = f32_tensor(tail_p);
  AdamWState tail = AdamWState::zeros(100, true, Device::cpu());
  adamw_step(tp, f32_tensor(tail_g), tail, hyper);
  std::vector<float> all = p.to_vector<float>(), part = tp.to_vector<float>();
  std::vector<uint8_t> all_m = whole.m_codes.to_vector<uint8_t>(), part_m = tail.m_codes.to_vector<uint8_t>();
  for (int64_t j = 0; j < 100; ++j) {
    EXPECT_EQ(bits_of(all[512 + j]), bits_of(part[j])) << j;
    EXPECT_EQ(all_m[512 + j], part_m[j]) << j;
  }
  EXPECT_EQ(whole.absmax_m.to_vector<float>()[2], tail.absmax_m.to_vector<float>()[0]);
}

// ---- the non-finite rule ----

TEST(NonFiniteGradients, LeaveParameterUnchangedZeroStateAndAreCounted) {
  const int64_t n = 4096 + 300;
  const std::vector<int64_t> bad = {5, 700, n - 1};
  for (int variant = 0; variant < 3; ++variant) {  // 8-bit AdamW, 32-bit AdamW, SGD with momentum
    SCOPED_TRACE(variant == 0 ? "adamw8bit" : variant == 1 ? "adamw32" : "sgd");
    Tensor p = f32_tensor(random_vector(n, 1.0f, 21));
    AdamWState state = AdamWState::zeros(n, variant == 0, Device::cpu());
    Tensor buf = Tensor::empty({n}, DType::F32);
    AdamWHyper hyper;
    SgdHyper sgd{0.01f, 0.9f, 0.0f, 0.0f, false, 1};
    auto step = [&](const std::vector<float>& g, int64_t t) {
      hyper.step = sgd.step = t;
      return variant == 2 ? sgd_step(p, f32_tensor(g), buf, sgd) : adamw_step(p, f32_tensor(g), state, hyper);
    };
    for (int64_t t = 1; t <= 2; ++t) ASSERT_EQ(step(random_vector(n, 0.1f, 30 + uint32_t(t)), t), 0);
    std::vector<float> before = p.to_vector<float>();
    std::vector<float> g = random_vector(n, 0.1f, 40);
    g[bad[0]] = std::numeric_limits<float>::quiet_NaN();
    g[bad[1]] = std::numeric_limits<float>::infinity();
    g[bad[2]] = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(step(g, 3), 3);
    std::vector<float> after = p.to_vector<float>();
    for (int64_t i : bad) EXPECT_EQ(bits_of(after[i]), bits_of(before[i])) << "element " << i;
    int64_t n_changed = 0;
    for (int64_t i = 0; i < n; ++i) n_changed += after[i] != before[i];
    EXPECT_EQ(n_changed, n - 3);
    // Their state is zero.
    std::vector<float> m, v;
    if (variant == 0) {
      m = dequantize(state.m_codes.to_vector<uint8_t>(), state.absmax_m.to_vector<float>(), true);
      v = dequantize(state.v_codes.to_vector<uint8_t>(), state.absmax_v.to_vector<float>(), false);
    } else if (variant == 1) {
      m = state.m.to_vector<float>();
      v = state.v.to_vector<float>();
    } else {
      m = v = buf.to_vector<float>();
    }
    for (int64_t i : bad) {
      EXPECT_EQ(m[i], 0.0f) << "element " << i;
      EXPECT_EQ(v[i], 0.0f) << "element " << i;
    }
    EXPECT_NE(m[6], 0.0f);
    // A count tensor accumulates instead (no synchronization) and the call returns -1.
    Tensor count = Tensor::scalar(10.0, DType::I64);
    hyper.step = sgd.step = 4;
    int64_t returned = variant == 2 ? sgd_step(p, f32_tensor(g), buf, sgd, count)
                                    : adamw_step(p, f32_tensor(g), state, hyper, count);
    EXPECT_EQ(returned, -1);
    EXPECT_EQ(count.item(), 13.0);
  }
}

// ---- 8-bit vs 32-bit decision and state layout ----

TEST(AdamWState, EightBitOnlyFrom4096Elements) {
  EXPECT_FALSE(use_8bit_state(0));
  EXPECT_FALSE(use_8bit_state(4095));
  EXPECT_TRUE(use_8bit_state(4096));
  EXPECT_TRUE(use_8bit_state(int64_t(1) << 33));
  AdamWState small = AdamWState::zeros(4095, use_8bit_state(4095), Device::cpu());
  EXPECT_FALSE(small.eight_bit);
  EXPECT_EQ(small.nbytes(), 8 * 4095);
  AdamWState large = AdamWState::zeros(256 * 1000, use_8bit_state(256 * 1000), Device::cpu());
  EXPECT_TRUE(large.eight_bit);
  EXPECT_DOUBLE_EQ(double(large.nbytes()) / (256 * 1000), 2.03125);
  NamedTensors named = adamw_state_tensors(large);
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].first, "m_codes");
  EXPECT_EQ(named[0].second.describe(), "u8[256000] cpu");
  EXPECT_EQ(named[2].first, "absmax_m");
  EXPECT_EQ(named[2].second.describe(), "f32[1000] cpu");
}

TEST(AdamWState, SaveAndRestoreIsBitExact) {
  for (bool eight_bit : {true, false}) {
    SCOPED_TRACE(eight_bit ? "8-bit" : "32-bit");
    const int64_t n = 5000;
    Tensor p = f32_tensor(random_vector(n, 1.0f, 8));
    AdamWState state = AdamWState::zeros(n, eight_bit, Device::cpu());
    AdamWHyper hyper;
    std::vector<std::vector<float>> grads;
    for (int t = 0; t < 5; ++t) grads.push_back(random_vector(n, 0.2f, 50 + t));
    for (int64_t t = 1; t <= 3; ++t) {
      hyper.step = t;
      adamw_step(p, f32_tensor(grads[t - 1]), state, hyper);
    }
    // Save: copies of the named tensors and of p.
    NamedTensors saved;
    for (const auto& [name, tensor] : adamw_state_tensors(state)) saved.emplace_back(name, tensor.clone());
    Tensor p_saved = p.clone();
    for (int64_t t = 4; t <= 5; ++t) {
      hyper.step = t;
      adamw_step(p, f32_tensor(grads[t - 1]), state, hyper);
    }
    // Restore into a fresh state and replay the same two steps.
    AdamWState restored = AdamWState::zeros(n, eight_bit, Device::cpu());
    load_adamw_state(restored, saved);
    for (size_t k = 0; k < saved.size(); ++k) {
      Tensor a = saved[k].second, b = adamw_state_tensors(restored)[k].second;
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.nbytes())) << saved[k].first;
    }
    for (int64_t t = 4; t <= 5; ++t) {
      hyper.step = t;
      adamw_step(p_saved, f32_tensor(grads[t - 1]), restored, hyper);
    }
    EXPECT_EQ(0, std::memcmp(p.data(), p_saved.data(), p.nbytes()));
    NamedTensors final_a = adamw_state_tensors(state), final_b = adamw_state_tensors(restored);
    for (size_t k = 0; k < final_a.size(); ++k)
      EXPECT_EQ(0, std::memcmp(final_a[k].second.data(), final_b[k].second.data(), final_a[k].second.nbytes()))
          << final_a[k].first;
  }
}

TEST(AdamWState, LoadRejectsWrongNamesShapesAndDtypes) {
  AdamWState state = AdamWState::zeros(300, true, Device::cpu());
  NamedTensors good = adamw_state_tensors(AdamWState::zeros(300, true, Device::cpu()));
  NamedTensors missing(good.begin(), good.begin() + 3);
  NamedTensors renamed = good;
  renamed[1].first = "v";
  NamedTensors wrong_shape = good;
  wrong_shape[2].second = Tensor::empty({3}, DType::F32);
  NamedTensors wrong_dtype = good;
  wrong_dtype[0].second = Tensor::empty({300}, DType::F32);
  for (const NamedTensors* bad : {&missing, &renamed, &wrong_shape, &wrong_dtype}) {
    try {
      load_adamw_state(state, *bad);
      ADD_FAILURE() << "load_adamw_state accepted a bad state";
    } catch (const WickError& error) {
      EXPECT_THAT(error.what(), HasSubstr("load_adamw_state"));
    }
  }
  EXPECT_NO_THROW(load_adamw_state(state, good));
  Tensor buf = Tensor::empty({10}, DType::F32);
  EXPECT_THROW(load_sgd_state(buf, {{"momentum", Tensor::empty({11}, DType::F32)}}), WickError);
}

TEST(FlatOptimizerErrors, BadInputsThrowNamingTheOp) {
  const int64_t n = 600;
  Tensor p = Tensor::empty({n}, DType::F32), g = Tensor::empty({n}, DType::F32);
  Tensor codes = Tensor::empty({n}, DType::U8), absmax = Tensor::empty({3}, DType::F32);
  AdamWHyper hyper;
  auto expect_error = [](const auto& call, const char* op, const char* detail) {
    try {
      call();
      ADD_FAILURE() << op << " accepted bad input (" << detail << ")";
    } catch (const WickError& error) {
      EXPECT_THAT(error.what(), HasSubstr(op));
      EXPECT_THAT(error.what(), HasSubstr(detail));
    }
  };
  expect_error([&] { adamw8bit_step(p, g, codes, codes, Tensor::empty({2}, DType::F32), absmax, hyper); },
               "adamw8bit_step", "absmax_m");
  expect_error([&] { adamw8bit_step(p, g, absmax, codes, absmax, absmax, hyper); }, "adamw8bit_step", "m_codes");
  expect_error([&] { adamw_step(p, Tensor::empty({n}, DType::BF16), p.clone(), p.clone(), hyper); }, "adamw_step",
               "bf16");
  expect_error([&] { adamw_step(p, g, p.clone(), Tensor::empty({n + 1}, DType::F32), hyper); }, "adamw_step", "v");
  AdamWHyper zero_step = hyper;
  zero_step.step = 0;
  expect_error([&] { adamw_step(p, g, p.clone(), p.clone(), zero_step); }, "adamw_step", "1-based");
  Tensor strided = Tensor::empty({2 * n}, DType::F32).slice(0, 0, 2 * n, 2);
  expect_error([&] { sgd_step(strided, g, Tensor(), SgdHyper{}); }, "sgd_step", "contiguous");
  expect_error([&] { sgd_step(p, g, Tensor(), SgdHyper{0.1f, 0.9f, 0.0f, 0.0f, false, 1}); }, "sgd_step",
               "momentum_buffer");
  expect_error([&] { sgd_step(p, g, p.clone(), SgdHyper{0.1f, 0.0f, 0.0f, 0.0f, true, 1}); }, "sgd_step", "nesterov");
}

// ---- CUDA vs CPU ----

TEST(FlatOptimizersCuda, MatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 100000 + 37;  // many blocks, a partial last one
  Device gpu = Device::cuda(0);
  std::vector<float> p0 = random_vector(n, 1.0f, 71);
  // 8-bit and 32-bit AdamW
  for (bool eight_bit : {true, false}) {
    SCOPED_TRACE(eight_bit ? "adamw8bit" : "adamw32");
    Tensor p_cpu = f32_tensor(p0), p_gpu = f32_tensor(p0, gpu);
    AdamWState s_cpu = AdamWState::zeros(n, eight_bit, Device::cpu()), s_gpu = AdamWState::zeros(n, eight_bit, gpu);
    AdamWHyper hyper;
    int64_t count_cpu = 0, count_gpu = 0;
    for (int64_t t = 1; t <= 10; ++t) {
      std::vector<float> g = random_vector(n, 0.1f, 200 + uint32_t(t));
      g[static_cast<size_t>(t * 977)] = std::numeric_limits<float>::quiet_NaN();
      hyper.step = t;
      count_cpu += adamw_step(p_cpu, f32_tensor(g), s_cpu, hyper);
      count_gpu += adamw_step(p_gpu, f32_tensor(g, gpu), s_gpu, hyper);
    }
    EXPECT_EQ(count_cpu, 10);
    EXPECT_EQ(count_gpu, 10);
    double rel = relative_to_max(p_gpu.to_vector<float>(), p_cpu.to_vector<float>());
    EXPECT_LE(rel, 1e-6);
    int n_bitwise_diff = std::memcmp(p_gpu.to_vector<float>().data(), p_cpu.to_vector<float>().data(), n * 4) != 0;
    int max_code_diff = 0;
    if (eight_bit) {
      for (const char* which : {"m", "v"}) {
        std::vector<uint8_t> a = (which[0] == 'm' ? s_cpu.m_codes : s_cpu.v_codes).to_vector<uint8_t>();
        std::vector<uint8_t> b = (which[0] == 'm' ? s_gpu.m_codes : s_gpu.v_codes).to_vector<uint8_t>();
        for (int64_t i = 0; i < n; ++i) max_code_diff = std::max(max_code_diff, std::abs(int(a[i]) - int(b[i])));
      }
      EXPECT_LE(max_code_diff, 1);
    }
    std::printf("[cuda vs cpu %s, 10 steps] max |dp|/max|p| %.3g, bitwise equal p: %s, max code diff %d\n",
                eight_bit ? "adamw8bit" : "adamw32", rel, n_bitwise_diff ? "no" : "yes", max_code_diff);
  }
  // SGD with nesterov momentum
  Tensor p_cpu = f32_tensor(p0), p_gpu = f32_tensor(p0, gpu);
  Tensor b_cpu = Tensor::empty({n}, DType::F32), b_gpu = Tensor::empty({n}, DType::F32, gpu);
  SgdHyper sgd{0.01f, 0.9f, 0.0f, 1e-4f, true, 1};
  for (int64_t t = 1; t <= 10; ++t) {
    std::vector<float> g = random_vector(n, 0.1f, 300 + uint32_t(t));
    sgd.step = t;
    sgd_step(p_cpu, f32_tensor(g), b_cpu, sgd);
    sgd_step(p_gpu, f32_tensor(g, gpu), b_gpu, sgd);
  }
  EXPECT_LE(relative_to_max(p_gpu.to_vector<float>(), p_cpu.to_vector<float>()), 1e-6);
}

// The 8-bit kernel bitwise against the CPU over 10 steps with NaN gradients: parameters, codes,
// absmax and counts, for 16-byte-aligned buffers (the vector path) and buffers one element off
// (element-wise loads), whole and partial last blocks, and fewer elements than one block.
TEST(FlatOptimizersCuda, EightBitBitwiseEqualToCpuAlignedAndNot) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Device gpu = Device::cuda(0);
  for (int64_t n : {int64_t(100000 + 37), int64_t(256 * 300), int64_t(77)}) {
    for (int64_t shift : {0, 1}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", offset " + std::to_string(shift));
      const int64_t n_blocks = n_quantization_blocks(n);
      std::vector<float> p0 = random_vector(n + shift, 1.0f, 81);
      Tensor p_cpu = f32_tensor(p0).narrow(0, shift, n), p_gpu = f32_tensor(p0, gpu).narrow(0, shift, n);
      auto codes = [&](Device d) { return AdamWState::zeros(n + shift, true, d).m_codes.narrow(0, shift, n); };
      Tensor mc_cpu = codes(Device::cpu()), vc_cpu = codes(Device::cpu()), mc_gpu = codes(gpu), vc_gpu = codes(gpu);
      AdamWState cpu_state = AdamWState::zeros(n, true, Device::cpu()), gpu_state = AdamWState::zeros(n, true, gpu);
      AdamWHyper hyper;
      int64_t count_cpu = 0, count_gpu = 0;
      for (int64_t t = 1; t <= 10; ++t) {
        std::vector<float> g = random_vector(n + shift, 0.1f, 400 + uint32_t(t));
        g[static_cast<size_t>((t * 977) % n + shift)] = t % 2 ? std::numeric_limits<float>::quiet_NaN()
                                                                : std::numeric_limits<float>::infinity();
        hyper.step = t;
        Tensor g_cpu = f32_tensor(g).narrow(0, shift, n), g_gpu = f32_tensor(g, gpu).narrow(0, shift, n);
        count_cpu += adamw8bit_step(p_cpu, g_cpu, mc_cpu, vc_cpu, cpu_state.absmax_m, cpu_state.absmax_v, hyper);
        count_gpu += adamw8bit_step(p_gpu, g_gpu, mc_gpu, vc_gpu, gpu_state.absmax_m, gpu_state.absmax_v, hyper);
      }
      EXPECT_EQ(count_cpu, 10);
      EXPECT_EQ(count_gpu, 10);
      auto bitwise_equal = [](const Tensor& a, const Tensor& b) {
        Tensor ca = a.to(Device::cpu()).contiguous(), cb = b.to(Device::cpu()).contiguous();
        return ca.nbytes() == cb.nbytes() && std::memcmp(ca.data(), cb.data(), ca.nbytes()) == 0;
      };
      EXPECT_TRUE(bitwise_equal(p_gpu, p_cpu)) << "parameters";
      EXPECT_TRUE(bitwise_equal(mc_gpu, mc_cpu)) << "m codes";
      EXPECT_TRUE(bitwise_equal(vc_gpu, vc_cpu)) << "v codes";
      EXPECT_TRUE(bitwise_equal(gpu_state.absmax_m, cpu_state.absmax_m)) << "absmax_m of " << n_blocks << " blocks";
      EXPECT_TRUE(bitwise_equal(gpu_state.absmax_v, cpu_state.absmax_v)) << "absmax_v";
      EXPECT_GT(cpu_state.absmax_m.to_vector<float>()[0], 0.0f);
    }
  }
}

// ---- 500-step drift: 8-bit vs 32-bit AdamW on a two-layer linear regression ----

// Y = X T + noise (teacher plus label noise, so the optimum loss is well above zero); the student
// predicts X W1 W2; loss = 0.5 * mean over samples of |X W1 W2 - Y|^2.
struct TwoLayerProblem {
  int n_samples = 128, d_in = 64, d_hidden = 96, d_out = 8;
  std::vector<float> x, y;  // [n_samples, d_in], [n_samples, d_out]
  int64_t n_w1() const { return int64_t(d_in) * d_hidden; }
  int64_t n_params() const { return n_w1() + int64_t(d_hidden) * d_out; }

  TwoLayerProblem() {
    x = random_vector(int64_t(n_samples) * d_in, 1.0f, 1001);
    std::vector<float> teacher = random_vector(int64_t(d_in) * d_out, 0.3f, 1002);
    std::vector<float> noise = random_vector(int64_t(n_samples) * d_out, 0.5f, 1004);
    y.assign(int64_t(n_samples) * d_out, 0.0f);
    for (int s = 0; s < n_samples; ++s)
      for (int o = 0; o < d_out; ++o) {
        double acc = 0;
        for (int i = 0; i < d_in; ++i) acc += double(x[s * d_in + i]) * teacher[i * d_out + o];
        y[s * d_out + o] = static_cast<float>(acc) + noise[s * d_out + o];
      }
  }

  // Loss at the flat parameters w (W1 then W2, row-major); writes the analytic gradient.
  double loss_and_grad(const float* w, float* grad) const {
    const float* w1 = w;
    const float* w2 = w + n_w1();
    std::vector<double> h(size_t(n_samples) * d_hidden, 0.0), r(size_t(n_samples) * d_out, 0.0);
    for (int s = 0; s < n_samples; ++s)
      for (int i = 0; i < d_in; ++i) {
        double xi = x[s * d_in + i];
        for (int k = 0; k < d_hidden; ++k) h[s * d_hidden + k] += xi * w1[i * d_hidden + k];
      }
    double loss = 0;
    for (int s = 0; s < n_samples; ++s)
      for (int o = 0; o < d_out; ++o) {
        double out = 0;
        for (int k = 0; k < d_hidden; ++k) out += h[s * d_hidden + k] * w2[k * d_out + o];
        double diff = out - y[s * d_out + o];
        loss += 0.5 * diff * diff / n_samples;
        r[s * d_out + o] = diff / n_samples;  // dL/d out
      }
    if (grad == nullptr) return loss;
    // dL/dW2 = H^T R; dL/dH = R W2^T; dL/dW1 = X^T dH
    std::vector<double> g1(n_w1(), 0.0), g2(size_t(d_hidden) * d_out, 0.0), dh(size_t(n_samples) * d_hidden, 0.0);
    for (int s = 0; s < n_samples; ++s)
      for (int k = 0; k < d_hidden; ++k)
        for (int o = 0; o < d_out; ++o) {
          g2[k * d_out + o] += h[s * d_hidden + k] * r[s * d_out + o];
          dh[s * d_hidden + k] += r[s * d_out + o] * w2[k * d_out + o];
        }
    for (int s = 0; s < n_samples; ++s)
      for (int i = 0; i < d_in; ++i) {
        double xi = x[s * d_in + i];
        for (int k = 0; k < d_hidden; ++k) g1[i * d_hidden + k] += xi * dh[s * d_hidden + k];
      }
    for (int64_t j = 0; j < n_w1(); ++j) grad[j] = static_cast<float>(g1[j]);
    for (size_t j = 0; j < g2.size(); ++j) grad[n_w1() + j] = static_cast<float>(g2[j]);
    return loss;
  }
};

TEST(AdamW8bit, FiveHundredStepDriftWithinOnePercentOf32Bit) {
  TwoLayerProblem problem;
  int64_t n = problem.n_params();
  ASSERT_TRUE(use_8bit_state(n));
  std::vector<float> w0 = random_vector(n, 0.1f, 1003);
  double initial_loss = problem.loss_and_grad(w0.data(), nullptr);
  double final_loss[2] = {0, 0};
  const int64_t checkpoints[] = {25, 50, 100, 250};
  double checkpoint_loss[2][4] = {};
  for (int eight_bit = 0; eight_bit < 2; ++eight_bit) {
    Tensor w = f32_tensor(w0), g = Tensor::empty({n}, DType::F32);
    AdamWState state = AdamWState::zeros(n, eight_bit != 0, Device::cpu());
    AdamWHyper hyper{3e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 1};
    for (int64_t t = 1; t <= 500; ++t) {
      double loss = problem.loss_and_grad(w.data_as<float>(), g.data_as<float>());
      for (int c = 0; c < 4; ++c)
        if (t - 1 == checkpoints[c]) checkpoint_loss[eight_bit][c] = loss;
      hyper.step = t;
      ASSERT_EQ(adamw_step(w, g, state, hyper), 0);
    }
    final_loss[eight_bit] = problem.loss_and_grad(w.data_as<float>(), nullptr);
  }
  for (int c = 0; c < 4; ++c)
    std::printf("[drift] after %lld steps: adamw32 %.6g, adamw8bit %.6g\n", static_cast<long long>(checkpoints[c]),
                checkpoint_loss[0][c], checkpoint_loss[1][c]);
  double rel = std::fabs(final_loss[1] - final_loss[0]) / final_loss[0];
  std::printf("[drift, 500 steps, %lld params] loss: initial %.6g, adamw32 %.6g, adamw8bit %.6g, relative diff %.3g\n",
              static_cast<long long>(n), initial_loss, final_loss[0], final_loss[1], rel);
  EXPECT_LT(final_loss[0], 0.05 * initial_loss);  // it did train (the noise floor is ~0.03)
  EXPECT_LE(rel, 0.01);
}

}  // namespace
}  // namespace wick
