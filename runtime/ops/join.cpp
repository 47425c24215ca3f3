#include "runtime/ops/join.h"

#include <algorithm>

#include "runtime/ops/copy.h"
#include "runtime/ops/index.h"

namespace wick {

Tensor concat(const std::vector<Tensor>& tensors, int64_t axis) {
  const char* op = "concat";
  WICK_CHECK(!tensors.empty(), op, ": no tensors to join");
  const Tensor& first = tensors[0];
  WICK_CHECK(first.dim() >= 1, op, ": cannot join 0-d tensors (use stack), got ", first.describe());
  int64_t a = normalize_axis(axis, first.dim(), op);
  Shape out_shape = first.shape();
  out_shape[a] = 0;
  DType dtype = first.dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    WICK_CHECK(t.device() == first.device(), op, ": tensor ", i, " ", t.describe(), " is on another device than ",
               first.describe());
    bool same = t.dim() == first.dim();
    for (int64_t d = 0; same && d < first.dim(); ++d) same = d == a || t.size(d) == first.size(d);
    WICK_CHECK(same, op, ": tensor ", i, " ", t.describe(), " does not match ", first.describe(),
               " outside axis ", a);
    out_shape[a] += t.size(a);
    dtype = promote_types(dtype, t.dtype());
  }
  Tensor out = Tensor::empty(out_shape, dtype, first.device());
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    if (t.size(a) > 0) copy_into(out.narrow(a, at, t.size(a)), t);
    at += t.size(a);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t axis) {
  const char* op = "stack";
  WICK_CHECK(!tensors.empty(), op, ": no tensors to join");
  int64_t rank = tensors[0].dim();
  int64_t a = axis < 0 ? axis + rank + 1 : axis;
  WICK_CHECK(a >= 0 && a <= rank, op, ": axis ", axis, " is out of range for rank ", rank + 1);
  std::vector<Tensor> expanded;
  for (size_t i = 0; i < tensors.size(); ++i) {
    WICK_CHECK(tensors[i].shape() == tensors[0].shape(), op, ": tensor ", i, " ", tensors[i].describe(),
               " differs in shape from ", tensors[0].describe());
    expanded.push_back(tensors[i].unsqueeze(a));
  }
  return concat(expanded, a);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis) {
  const char* op = "split";
  int64_t a = normalize_axis(axis, x.dim(), op);
  int64_t total = 0;
  for (int64_t size : sizes) {
    WICK_CHECK(size >= 0, op, ": negative size ", size);
    total += size;
  }
  WICK_CHECK(total == x.size(a), op, ": sizes sum to ", total, " but axis ", a, " of ", x.describe(), " has extent ",
             x.size(a));
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (int64_t size : sizes) {
    parts.push_back(x.narrow(a, at, size));
    at += size;
  }
  return parts;
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t axis) {
  const char* op = "split";
  int64_t a = normalize_axis(axis, x.dim(), op);
  WICK_CHECK(size > 0, op, ": size must be positive, got ", size);
  int64_t extent = x.size(a);
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < extent; at += size) sizes.push_back(std::min(size, extent - at));
  if (sizes.empty()) sizes.push_back(0);  // torch returns one empty piece for an empty axis
  return split(x, sizes, a);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t n_chunks, int64_t axis) {
  WICK_CHECK(n_chunks > 0, "chunk: number of chunks must be positive, got ", n_chunks);
  int64_t a = normalize_axis(axis, x.dim(), "chunk");
  int64_t size = std::max<int64_t>(1, (x.size(a) + n_chunks - 1) / n_chunks);
  return split(x, size, a);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  const char* op = "pad";
  WICK_CHECK(pads.size() % 2 == 0 && static_cast<int64_t>(pads.size()) <= 2 * x.dim(), op, ": ", pads.size(),
             " pad amounts for ", x.describe(), " (need an even number, at most 2 per axis)");
  for (int64_t amount : pads) WICK_CHECK(amount >= 0, op, ": negative pad ", amount, " is not supported");
  int64_t n_padded = static_cast<int64_t>(pads.size()) / 2;
  Shape out_shape = x.shape();
  for (int64_t k = 0; k < n_padded; ++k) {
    int64_t d = x.dim() - 1 - k, before = pads[2 * k], after = pads[2 * k + 1];
    if (mode == PadMode::Reflect)
      WICK_CHECK(before < x.size(d) && after < x.size(d), op, ": reflect pads (", before, ", ", after,
                 ") must be smaller than the extent ", x.size(d), " of axis ", d, " in ", x.describe());
    if (mode == PadMode::Replicate && before + after > 0)
      WICK_CHECK(x.size(d) > 0, op, ": cannot replicate-pad the empty axis ", d, " of ", x.describe());
    out_shape[d] += before + after;
  }
  if (mode == PadMode::Constant) {
    Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
    if (out.numel() == 0) return out;
    copy_into(out, Tensor::scalar(value, x.dtype(), x.device()));
    Tensor interior = out;
    for (int64_t k = 0; k < n_padded; ++k) {
      int64_t d = x.dim() - 1 - k;
      interior = interior.narrow(d, pads[2 * k], x.size(d));
    }
    copy_into(interior, x);
    return out;
  }
  // Reflect / replicate: one index_select per padded axis with the source position of every output
  // position along it (so each pass is a plain gather of rows, on any device).
  Tensor out = x;
  for (int64_t k = 0; k < n_padded; ++k) {
    int64_t d = x.dim() - 1 - k, before = pads[2 * k], after = pads[2 * k + 1];
    if (before == 0 && after == 0) continue;
    int64_t extent = x.size(d);
    std::vector<int64_t> source(static_cast<size_t>(extent + before + after));
    for (int64_t j = 0; j < static_cast<int64_t>(source.size()); ++j) {
      int64_t at = j - before;
      if (mode == PadMode::Reflect) {
        if (at < 0) at = -at;
        if (at >= extent) at = 2 * (extent - 1) - at;
      } else {
        at = std::clamp<int64_t>(at, 0, extent - 1);
      }
      source[static_cast<size_t>(j)] = at;
    }
    out = index_select(out, d, Tensor::from_vector<int64_t>(source, {static_cast<int64_t>(source.size())},
                                                            x.device()));
  }
  return out.same(x) ? x.clone() : out;
}

}  // namespace wick
