#include "engine/autograd/ops_layout.h"

#include "engine/autograd/node.h"
#include "runtime/ops/layout.h"

namespace wick::autograd {
namespace {

class PixelShuffleNode : public Node {
 public:
  explicit PixelShuffleNode(int64_t r) : r_(r) {}
  const char* name() const override { return "pixel_shuffle"; }
  // y = P x for a permutation P  =>  dx = P^-1 dy = pixel_unshuffle(dy)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::pixel_unshuffle(grad[0], r_)};
  }

 private:
  int64_t r_;
};

class PixelUnshuffleNode : public Node {
 public:
  explicit PixelUnshuffleNode(int64_t r) : r_(r) {}
  const char* name() const override { return "pixel_unshuffle"; }
  // y = P^-1 x  =>  dx = P dy = pixel_shuffle(dy)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {wick::pixel_shuffle(grad[0], r_)}; }

 private:
  int64_t r_;
};

class PatchifyNode : public Node {
 public:
  PatchifyNode(int64_t p, int64_t height, int64_t width) : p_(p), height_(height), width_(width) {}
  const char* name() const override { return "patchify"; }
  // y = P x  =>  dx = P^-1 dy = unpatchify(dy)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {wick::unpatchify(grad[0], p_, height_, width_)};
  }

 private:
  int64_t p_, height_, width_;
};

class UnpatchifyNode : public Node {
 public:
  explicit UnpatchifyNode(int64_t p) : p_(p) {}
  const char* name() const override { return "unpatchify"; }
  // y = P^-1 t  =>  dt = P dy = patchify(dy)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override { return {wick::patchify(grad[0], p_)}; }

 private:
  int64_t p_;
};

}  // namespace

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  Tensor out = wick::pixel_shuffle(x, r);
  if (needs_grad({x})) record(std::make_shared<PixelShuffleNode>(r), {x}, out);
  return out;
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  Tensor out = wick::pixel_unshuffle(x, r);
  if (needs_grad({x})) record(std::make_shared<PixelUnshuffleNode>(r), {x}, out);
  return out;
}

Tensor patchify(const Tensor& x, int64_t p) {
  Tensor out = wick::patchify(x, p);
  if (needs_grad({x})) record(std::make_shared<PatchifyNode>(p, x.size(2), x.size(3)), {x}, out);
  return out;
}

Tensor unpatchify(const Tensor& tokens, int64_t p, int64_t height, int64_t width) {
  Tensor out = wick::unpatchify(tokens, p, height, width);
  if (needs_grad({tokens})) record(std::make_shared<UnpatchifyNode>(p), {tokens}, out);
  return out;
}

}  // namespace wick::autograd
