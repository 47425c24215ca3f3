#include "runtime/ops/layout.h"

namespace wick {

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  const char* op = "pixel_shuffle";
  WICK_CHECK(r >= 1, op, ": factor must be positive, got ", r);
  WICK_CHECK(x.dim() >= 3, op, ": expected [*, C*r*r, H, W], got ", x.describe());
  int64_t channels = x.size(-3), height = x.size(-2), width = x.size(-1);
  WICK_CHECK(channels % (r * r) == 0, op, ": channels ", channels, " of ", x.describe(),
             " are not divisible by r*r = ", r * r);
  Shape lead(x.shape().begin(), x.shape().end() - 3);
  int64_t batch = numel(lead), c = channels / (r * r);
  Tensor t = x.reshape({batch, c, r, r, height, width}).permute({0, 1, 4, 2, 5, 3}).contiguous();
  Shape out_shape = lead;
  out_shape.insert(out_shape.end(), {c, height * r, width * r});
  return t.view(out_shape);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  const char* op = "pixel_unshuffle";
  WICK_CHECK(r >= 1, op, ": factor must be positive, got ", r);
  WICK_CHECK(x.dim() >= 3, op, ": expected [*, C, H*r, W*r], got ", x.describe());
  int64_t c = x.size(-3), height = x.size(-2), width = x.size(-1);
  WICK_CHECK(height % r == 0 && width % r == 0, op, ": spatial size of ", x.describe(), " is not divisible by ", r);
  Shape lead(x.shape().begin(), x.shape().end() - 3);
  int64_t batch = numel(lead), h = height / r, w = width / r;
  Tensor t = x.reshape({batch, c, h, r, w, r}).permute({0, 1, 3, 5, 2, 4}).contiguous();
  Shape out_shape = lead;
  out_shape.insert(out_shape.end(), {c * r * r, h, w});
  return t.view(out_shape);
}

Tensor patchify(const Tensor& x, int64_t p) {
  const char* op = "patchify";
  WICK_CHECK(p >= 1, op, ": patch size must be positive, got ", p);
  WICK_CHECK(x.dim() == 4, op, ": expected [B, C, H, W], got ", x.describe());
  int64_t b = x.size(0), c = x.size(1), height = x.size(2), width = x.size(3);
  WICK_CHECK(height % p == 0 && width % p == 0, op, ": spatial size of ", x.describe(),
             " is not divisible by the patch size ", p);
  int64_t h = height / p, w = width / p;
  // b c (h ph) (w pw) -> b h w c ph pw
  Tensor t = x.reshape({b, c, h, p, w, p}).permute({0, 2, 4, 1, 3, 5}).contiguous();
  return t.view({b, h * w, c * p * p});
}

Tensor unpatchify(const Tensor& tokens, int64_t p, int64_t height, int64_t width) {
  const char* op = "unpatchify";
  WICK_CHECK(p >= 1, op, ": patch size must be positive, got ", p);
  WICK_CHECK(tokens.dim() == 3, op, ": expected tokens [B, (H/p)*(W/p), C*p*p], got ", tokens.describe());
  WICK_CHECK(height % p == 0 && width % p == 0, op, ": size ", height, "x", width,
             " is not divisible by the patch size ", p);
  int64_t b = tokens.size(0), h = height / p, w = width / p;
  WICK_CHECK(tokens.size(1) == h * w, op, ": ", tokens.describe(), " has ", tokens.size(1), " tokens, but ", height,
             "x", width, " with patch ", p, " needs ", h * w);
  WICK_CHECK(tokens.size(2) % (p * p) == 0, op, ": token width ", tokens.size(2), " of ", tokens.describe(),
             " is not divisible by p*p = ", p * p);
  int64_t c = tokens.size(2) / (p * p);
  // b h w c ph pw -> b c (h ph) (w pw)
  Tensor t = tokens.reshape({b, h, w, c, p, p}).permute({0, 3, 1, 4, 2, 5}).contiguous();
  return t.view({b, c, height, width});
}

}  // namespace wick
