#include "models/zimage/zimage_sequence.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"

namespace wick::zimage {
namespace {

constexpr int64_t kSequenceMultiple = 32;  // image and caption tokens are padded to multiples of it

int64_t round_up(int64_t n) { return (n + kSequenceMultiple - 1) / kSequenceMultiple * kSequenceMultiple; }

// Per axis, the frequencies 1 / theta^(2j / d), j < d / 2, in f64 (as the authors' precompute_freqs_cis).
std::vector<std::vector<double>> axis_frequencies(const ZImageRope& rope) {
  std::vector<std::vector<double>> out;
  for (int64_t d : rope.axes_dims) {
    std::vector<double> f;
    for (int64_t j = 0; j < d / 2; ++j)
      f.push_back(1.0 / std::pow(rope.theta, static_cast<double>(2 * j) / static_cast<double>(d)));
    out.push_back(std::move(f));
  }
  return out;
}

// cos/sin [B, length, 1, half] of the sequences' position ids; rows past a sequence's end: angle 0.
RopeTables rope_tables(const std::vector<Tensor>& positions, int64_t length, const ZImageRope& rope, int64_t half,
                       Device device) {
  const std::vector<std::vector<double>> frequencies = axis_frequencies(rope);
  const int64_t batch = static_cast<int64_t>(positions.size());
  std::vector<float> cos(static_cast<size_t>(batch * length * half), 1.0f), sin(cos.size(), 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<float> ids = positions[static_cast<size_t>(b)].to_vector<float>();
    for (size_t i = 0; i < ids.size() / 3; ++i) {
      size_t out = (static_cast<size_t>(b * length) + i) * static_cast<size_t>(half);
      for (size_t axis = 0; axis < frequencies.size(); ++axis) {
        const int64_t position = static_cast<int64_t>(ids[i * 3 + axis]);
        WICK_CHECK(position >= 0 && position < rope.axes_lens[axis], "Z-Image: position ", position, " on RoPE axis ",
                   axis, " is beyond axes_lens ", rope.axes_lens[axis],
                   " (a caption or image too long for this model's RoPE tables)");
        for (double f : frequencies[axis]) {
          const float angle = static_cast<float>(static_cast<double>(position) * f);
          cos[out] = std::cos(angle);
          sin[out++] = std::sin(angle);
        }
      }
    }
  }
  return {Tensor::from_vector<float>(cos, {batch, length, 1, half}, device),
          Tensor::from_vector<float>(sin, {batch, length, 1, half}, device)};
}

// The key mask U8 [B, 1, 1, length] of sequences of `lengths`, or undefined when none is padded.
Tensor key_mask(const std::vector<int64_t>& lengths, int64_t length, Device device) {
  if (std::all_of(lengths.begin(), lengths.end(), [length](int64_t n) { return n == length; })) return Tensor();
  std::vector<uint8_t> keep(lengths.size() * static_cast<size_t>(length), 0);
  for (size_t b = 0; b < lengths.size(); ++b)
    std::fill_n(keep.begin() + static_cast<std::ptrdiff_t>(b * static_cast<size_t>(length)), lengths[b], uint8_t{1});
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
  WICK_CHECK(latent.dim() == 3 && latent.size(1) % p == 0 && latent.size(2) % p == 0,
             "Z-Image patchify: ", latent.describe(), " is not [C, H, W] with H and W multiples of ", p);
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

PaddedBatch pad_batch(const TokenLists& lists, const ZImageRope& rope, int64_t head_dim, Device device) {
  PaddedBatch out;
  for (const Tensor& t : lists.tokens) out.lengths.push_back(t.size(0));
  const int64_t length = *std::max_element(out.lengths.begin(), out.lengths.end());
  std::vector<Tensor> rows;
  for (const Tensor& t : lists.tokens) {
    const int64_t missing = length - t.size(0);
    rows.push_back(missing == 0 ? t : autograd::concat({t, zeros({missing, t.size(1)}, t.dtype(), t.device())}, 0));
  }
  out.x = autograd::stack(rows, 0);
  out.rope = rope_tables(lists.positions, length, rope, head_dim / 2, device);
  out.mask = key_mask(out.lengths, length, device);
  return out;
}

}  // namespace wick::zimage
