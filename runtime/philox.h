// Philox-4x32-10 counter-based random numbers that are bit-for-bit the same on the CPU and on CUDA.
//
//   RngStream s = derive_stream(seed, sample_id, epoch, RngPurpose::Noise);
//   float u = stream_uniform(s, i);         // element i of the stream, in [0, 1)
//   float z = stream_normal(s, i);          // element i of the stream, standard normal
//   PhiloxBlock b = philox4x32_10(counter, key);   // the raw block function
//
// Stream scheme (frozen: changing any of it changes every random number wick has ever drawn):
//   key     = seed (key word 0 = low 32 bits, word 1 = high 32 bits);
//   stream  = mix64(mix64(mix64(purpose) ^ epoch) ^ sample_id), mix64 = the splitmix64 finalizer
//             applied after adding the golden-ratio increment;
//   element i of a stream is output word i % 4 of the block at counter
//             (words 0-1 = block index i / 4 as a 64-bit number, low word first;
//              words 2-3 = stream, low word first).
//   uniform(i) = (word >> 8) * 2^-24, in [0, 1).
//   normal(i)  = Box–Muller on the word pair (2p, 2p+1) of the same block, p = (i % 4) / 2:
//                u1 = ((w[2p] >> 8) + 1) * 2^-24 in (0, 1], u2 = (w[2p+1] >> 8) * 2^-24,
//                r = sqrt(-2 log u1); even i%4 -> r cos(2 pi u2), odd -> r sin(2 pi u2).
// log and sin/cos are wick's own (portable_log, portable_sincos_turns below), written with explicit
// single-rounding operations (fmaf, and __fmul_rn/__fadd_rn/__fdiv_rn/__fsqrt_rn on the device),
// so nvcc's contraction and the differences between CPU libm and CUDA's logf cannot change a bit.
// This header stays C++17-clean for nvcc.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/exact_float.h"

namespace wick {

// ---- the block function (Salmon et al. 2011, Random123) ----
struct PhiloxBlock {
  uint32_t word[4];
};
struct PhiloxKey {
  uint32_t word[2];
};

inline constexpr uint32_t philox_m0 = 0xD2511F53u;
inline constexpr uint32_t philox_m1 = 0xCD9E8D57u;
inline constexpr uint32_t philox_w0 = 0x9E3779B9u;  // Weyl key increments
inline constexpr uint32_t philox_w1 = 0xBB67AE85u;

WICK_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

WICK_HD PhiloxBlock philox_round(PhiloxBlock c, PhiloxKey k) {
  uint32_t hi0, lo0, hi1, lo1;
  philox_mulhilo(philox_m0, c.word[0], hi0, lo0);
  philox_mulhilo(philox_m1, c.word[2], hi1, lo1);
  PhiloxBlock out;
  out.word[0] = hi1 ^ c.word[1] ^ k.word[0];
  out.word[1] = lo1;
  out.word[2] = hi0 ^ c.word[3] ^ k.word[1];
  out.word[3] = lo0;
  return out;
}

// Philox-4x32 with 10 rounds: the key is bumped by the Weyl constants between rounds.
WICK_HD PhiloxBlock philox4x32_10(PhiloxBlock counter, PhiloxKey key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key.word[0] += philox_w0;
      key.word[1] += philox_w1;
    }
    counter = philox_round(counter, key);
  }
  return counter;
}

// ---- streams ----
// What a stream is used for; part of the stream derivation, so values are frozen.
enum class RngPurpose : uint32_t {
  Noise = 0,           // diffusion noise
  Timestep = 1,        // timestep / sigma sampling
  Dropout = 2,         // activation dropout masks
  CaptionDropout = 3,  // dropping the text condition (classifier-free guidance training)
  Init = 4,            // parameter initialization
  Augment = 5,         // data augmentation (flips, crops)
  Shuffle = 6,         // data order
  Test = 7,            // tests and benchmarks
  StepDropout = 8,     // dropout draws keyed by (step, rank), not by sample (engine/autograd/rng_state.h)
  LatentSample = 9,    // a training latent drawn from the cached VAE distribution, mean + exp(logvar / 2) * eps
};

struct RngStream {
  uint64_t key = 0;
  uint64_t stream = 0;
};

// splitmix64's output function (Steele, Lea, Flood 2014) after the golden-ratio increment.
WICK_HD uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The stream for one (seed, sample, epoch, purpose): key = seed, stream = a fixed mix of the rest.
WICK_HD RngStream derive_stream(uint64_t seed, uint64_t sample_id, uint64_t epoch, uint32_t purpose) {
  RngStream s;
  s.key = seed;
  s.stream = mix64(mix64(mix64(static_cast<uint64_t>(purpose)) ^ epoch) ^ sample_id);
  return s;
}
WICK_HD RngStream derive_stream(uint64_t seed, uint64_t sample_id, uint64_t epoch, RngPurpose purpose) {
  return derive_stream(seed, sample_id, epoch, static_cast<uint32_t>(purpose));
}

// The four words of block `block` of a stream (elements 4*block .. 4*block+3).
WICK_HD PhiloxBlock stream_block(const RngStream& s, uint64_t block) {
  PhiloxBlock counter;
  counter.word[0] = static_cast<uint32_t>(block);
  counter.word[1] = static_cast<uint32_t>(block >> 32);
  counter.word[2] = static_cast<uint32_t>(s.stream);
  counter.word[3] = static_cast<uint32_t>(s.stream >> 32);
  PhiloxKey key;
  key.word[0] = static_cast<uint32_t>(s.key);
  key.word[1] = static_cast<uint32_t>(s.key >> 32);
  return philox4x32_10(counter, key);
}

// ---- portable elementary functions ----
// Natural log for positive normal finite x (the only inputs the generators produce), within ~1 ulp.
// x = 2^k * m with m in [sqrt(1/2), sqrt(2)); log m = log1p(f) = f - f^2/2 + s (f^2/2 + R(s^2)),
// s = f / (2 + f), R the atanh series 2/3 z + 2/5 z^2 + ... (|s| <= 0.172, so six terms suffice).
WICK_HD float portable_log(float x) {
  uint32_t bits = float_bits(x);
  // Shift the exponent so that mantissas at or above sqrt(2) (0x3fb504f3) move to the next octave.
  bits += 0x3F800000u - 0x3F3504F3u;
  int k = static_cast<int>(bits >> 23) - 0x7F;
  bits = (bits & 0x007FFFFFu) + 0x3F3504F3u;
  float m = bits_float(bits);
  float f = sub_rn(m, 1.0f);  // exact (Sterbenz)
  float s = div_rn(f, add_rn(2.0f, f));
  float z = mul_rn(s, s);
  float poly = fma_rn(z, 0.15384615384615385f, 0.18181818181818182f);  // 2/13, 2/11
  poly = fma_rn(z, poly, 0.22222222222222222f);                        // 2/9
  poly = fma_rn(z, poly, 0.28571428571428571f);                        // 2/7
  poly = fma_rn(z, poly, 0.4f);                                         // 2/5
  poly = fma_rn(z, poly, 0.66666666666666667f);                        // 2/3
  float r = mul_rn(z, poly);
  float half_f2 = mul_rn(mul_rn(0.5f, f), f);
  float dk = static_cast<float>(k);
  // ln 2 split: ln2_hi has trailing zero bits, so dk * ln2_hi is exact for |k| < 128.
  const float ln2_hi = 6.9313812256e-01f;  // 0x3f317180
  const float ln2_lo = 9.0580006145e-06f;  // 0x3717f7d1
  float tail = fma_rn(s, add_rn(half_f2, r), mul_rn(dk, ln2_lo));
  tail = sub_rn(tail, half_f2);
  tail = add_rn(tail, f);
  return fma_rn(dk, ln2_hi, tail);
}

// sin(2 pi t) and cos(2 pi t) for t in turns (|t| < 2^22), within a few ulp. The reduction to
// r = t - n/4 in [-1/8, 1/8] is exact, so accuracy does not degrade across [0, 1).
WICK_HD void portable_sincos_turns(float t, float& sin_out, float& cos_out) {
#if defined(__CUDA_ARCH__)
  float quarter = floorf(add_rn(mul_rn(t, 4.0f), 0.5f));
#else
  float quarter = std::floor(add_rn(mul_rn(t, 4.0f), 0.5f));
#endif
  float r = sub_rn(t, mul_rn(quarter, 0.25f));  // exact
  float r2 = mul_rn(r, r);
  // sin(2 pi r) = r * (c1 + c3 r^2 + ...), cos(2 pi r) = 1 + c2 r^2 + ...  ((2 pi)^n / n!, signed)
  float sp = fma_rn(r2, -15.094642576822984f, 42.058693944897634f);  // -(2pi)^11/11!, (2pi)^9/9!
  sp = fma_rn(r2, sp, -76.705859753061360f);                         // -(2pi)^7/7!
  sp = fma_rn(r2, sp, 81.605249276075040f);                          // (2pi)^5/5!
  sp = fma_rn(r2, sp, -41.341702240399755f);                         // -(2pi)^3/3!
  sp = fma_rn(r2, sp, 6.2831853071795865f);                          // 2pi
  float sine = mul_rn(r, sp);
  float cp = fma_rn(r2, 7.9035363713184650f, -26.426256783374388f);  // (2pi)^12/12!, -(2pi)^10/10!
  cp = fma_rn(r2, cp, 60.244641371876640f);                          // (2pi)^8/8!
  cp = fma_rn(r2, cp, -85.456817206693710f);                         // -(2pi)^6/6!
  cp = fma_rn(r2, cp, 64.939394022668280f);                          // (2pi)^4/4!
  cp = fma_rn(r2, cp, -19.739208802178717f);                         // -(2pi)^2/2!
  float cosine = fma_rn(r2, cp, 1.0f);
  int quadrant = static_cast<int>(quarter) & 3;
  switch (quadrant) {
    case 0: sin_out = sine; cos_out = cosine; break;
    case 1: sin_out = cosine; cos_out = -sine; break;
    case 2: sin_out = -sine; cos_out = -cosine; break;
    default: sin_out = -cosine; cos_out = sine; break;
  }
}

// ---- stream elements ----
WICK_HD float philox_uniform(uint32_t word) { return mul_rn(static_cast<float>(word >> 8), 5.9604644775390625e-8f); }
// In (0, 1]: the Box–Muller radius needs log(u1) finite.
WICK_HD float philox_uniform_open_zero(uint32_t word) {
  return mul_rn(static_cast<float>((word >> 8) + 1u), 5.9604644775390625e-8f);
}
// The two standard normals of word pair (a, b): (r cos, r sin).
WICK_HD void philox_box_muller(uint32_t a, uint32_t b, float& z_cos, float& z_sin) {
  float radius = sqrt_rn(mul_rn(-2.0f, portable_log(philox_uniform_open_zero(a))));
  float s, c;
  portable_sincos_turns(philox_uniform(b), s, c);
  z_cos = mul_rn(radius, c);
  z_sin = mul_rn(radius, s);
}

// Uniform element j (0..3) of a block, and normal element j of a block.
WICK_HD float block_uniform(const PhiloxBlock& b, int j) { return philox_uniform(b.word[j]); }
WICK_HD float block_normal(const PhiloxBlock& b, int j) {
  int pair = j >> 1;
  float z_cos, z_sin;
  philox_box_muller(b.word[2 * pair], b.word[2 * pair + 1], z_cos, z_sin);
  return (j & 1) ? z_sin : z_cos;
}

WICK_HD float stream_uniform(const RngStream& s, uint64_t i) { return block_uniform(stream_block(s, i >> 2), static_cast<int>(i & 3)); }
WICK_HD float stream_normal(const RngStream& s, uint64_t i) { return block_normal(stream_block(s, i >> 2), static_cast<int>(i & 3)); }

// ---- distributions, shared by the CPU and CUDA fill kernels ----
enum class RandomDistribution : uint8_t {
  Uniform,    // scale * uniform + shift          (rand: scale 1, shift 0)
  Normal,     // scale * normal + shift           (randn: scale 1, shift 0)
  Bernoulli,  // 1 when uniform < scale, else 0   (U8 masks)
};

// Fills elements [offset, offset + n) of a stream into out[0, n), one Philox block at a time;
// `store(index, value)` writes one element. Blocks [first, first + n_blocks) are visited by the
// caller in any order or in parallel: fill_block handles block `block` only.
template <typename Store>
WICK_HD void fill_block(const RngStream& s, uint64_t block, uint64_t offset, uint64_t n, RandomDistribution dist,
                        float scale, float shift, const Store& store) {
  PhiloxBlock words = stream_block(s, block);
  uint64_t first = block * 4;
  for (int pair = 0; pair < 2; ++pair) {
    uint64_t e0 = first + 2 * pair, e1 = e0 + 1;
    bool want0 = e0 >= offset && e0 - offset < n, want1 = e1 >= offset && e1 - offset < n;
    if (!want0 && !want1) continue;
    float v0, v1;
    if (dist == RandomDistribution::Normal) {
      philox_box_muller(words.word[2 * pair], words.word[2 * pair + 1], v0, v1);
      v0 = fma_rn(v0, scale, shift);
      v1 = fma_rn(v1, scale, shift);
    } else {
      float u0 = philox_uniform(words.word[2 * pair]), u1 = philox_uniform(words.word[2 * pair + 1]);
      if (dist == RandomDistribution::Uniform) {
        v0 = fma_rn(u0, scale, shift);
        v1 = fma_rn(u1, scale, shift);
      } else {
        v0 = u0 < scale ? 1.0f : 0.0f;
        v1 = u1 < scale ? 1.0f : 0.0f;
      }
    }
    if (want0) store(e0 - offset, v0);
    if (want1) store(e1 - offset, v1);
  }
}

}  // namespace wick
