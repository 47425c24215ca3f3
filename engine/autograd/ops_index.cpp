#include "engine/autograd/ops_index.h"

#include <utility>

#include "engine/autograd/node.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/index.h"

namespace wick::autograd {
namespace {

// Gradients of 16-bit tensors are summed in f32 (scatter_add would round to the input's dtype).
DType accumulation_dtype(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16 ? DType::F32 : dtype; }

// zeros(shape) with `grad` added at the positions `index` names along axis (torch.scatter_add).
Tensor scatter_into_zeros(const Shape& shape, DType dtype, int64_t axis, const Tensor& index, const Tensor& grad) {
  Tensor zeros = wick::zeros(shape, accumulation_dtype(dtype), grad.device());
  return wick::scatter_add(zeros, axis, index, grad);
}

class EmbeddingNode : public Node {
 public:
  EmbeddingNode(Tensor ids, Shape weight_shape, DType weight_dtype)
      : ids_(std::move(ids)), weight_shape_(std::move(weight_shape)), weight_dtype_(weight_dtype) {}
  const char* name() const override { return "embedding"; }
  // y[i, :] = w[ids[i], :]  =>  dw[v, :] = sum over i with ids[i] = v of dy[i, :]
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    int64_t n = ids_.numel();
    Tensor zeros = wick::zeros(weight_shape_, accumulation_dtype(weight_dtype_), grad[0].device());
    return {wick::index_add(zeros, 0, ids_.reshape({n}), grad[0].reshape({n, weight_shape_[1]}))};
  }
  void release() override { ids_ = Tensor(); }

 private:
  Tensor ids_;
  Shape weight_shape_;
  DType weight_dtype_;
};

class IndexSelectNode : public Node {
 public:
  IndexSelectNode(Tensor index, int64_t axis, Shape x_shape, DType x_dtype)
      : index_(std::move(index)), axis_(axis), x_shape_(std::move(x_shape)), x_dtype_(x_dtype) {}
  const char* name() const override { return "index_select"; }
  // y[.., i, ..] = x[.., index[i], ..]  =>  dx[.., k, ..] = sum over i with index[i] = k of dy[.., i, ..]
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor zeros = wick::zeros(x_shape_, accumulation_dtype(x_dtype_), grad[0].device());
    return {wick::index_add(zeros, axis_, index_.reshape({index_.numel()}), grad[0])};
  }
  void release() override { index_ = Tensor(); }

 private:
  Tensor index_;
  int64_t axis_;
  Shape x_shape_;
  DType x_dtype_;
};

class GatherNode : public Node {
 public:
  GatherNode(Tensor index, int64_t axis, Shape x_shape, DType x_dtype)
      : index_(std::move(index)), axis_(axis), x_shape_(std::move(x_shape)), x_dtype_(x_dtype) {}
  const char* name() const override { return "gather"; }
  // y[..i..] = x[..index[..i..] at axis..]  =>  dx = scatter_add(zeros, axis, index, dy)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    return {scatter_into_zeros(x_shape_, x_dtype_, axis_, index_, grad[0])};
  }
  void release() override { index_ = Tensor(); }

 private:
  Tensor index_;
  int64_t axis_;
  Shape x_shape_;
  DType x_dtype_;
};

class ScatterAddNode : public Node {
 public:
  ScatterAddNode(Tensor index, int64_t axis, Shape src_shape, bool need_src)
      : index_(std::move(index)), axis_(axis), src_shape_(std::move(src_shape)), need_src_(need_src) {}
  const char* name() const override { return "scatter_add"; }
  // y = x + scatter(src)  =>  dx = dy,  dsrc[..i..] = dy[..index[..i..] at axis..] (0 beyond index)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor grad_src;
    if (need_src_) {
      Tensor picked = wick::gather(grad[0], axis_, index_);
      if (picked.shape() == src_shape_) {
        grad_src = picked;
      } else {
        grad_src = wick::zeros(src_shape_, picked.dtype(), picked.device());
        Tensor corner = grad_src;
        for (int64_t d = 0; d < picked.dim(); ++d) corner = corner.narrow(d, 0, picked.size(d));
        copy_into(corner, picked);
      }
    }
    return {grad[0], grad_src};
  }
  void release() override { index_ = Tensor(); }

 private:
  Tensor index_;
  int64_t axis_;
  Shape src_shape_;
  bool need_src_;
};

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  Tensor out = wick::embedding(weight, ids);  // validates
  if (needs_grad({weight}))
    record(std::make_shared<EmbeddingNode>(detach(ids), weight.shape(), weight.dtype()), {weight}, out);
  return out;
}

Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index) {
  Tensor out = wick::index_select(x, axis, index);  // validates
  if (needs_grad({x}))
    record(std::make_shared<IndexSelectNode>(detach(index), normalize_axis(axis, x.dim(), "index_select"), x.shape(),
                                             x.dtype()),
           {x}, out);
  return out;
}

Tensor gather(const Tensor& x, int64_t axis, const Tensor& index) {
  Tensor out = wick::gather(x, axis, index);  // validates
  if (needs_grad({x}))
    record(std::make_shared<GatherNode>(detach(index), normalize_axis(axis, x.dim(), "gather"), x.shape(), x.dtype()),
           {x}, out);
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src) {
  Tensor out = wick::scatter_add(x, axis, index, src);  // validates
  if (needs_grad({x, src}))
    record(std::make_shared<ScatterAddNode>(detach(index), normalize_axis(axis, x.dim(), "scatter_add"), src.shape(),
                                            requires_grad(src)),
           {x, src}, out);
  return out;
}

}  // namespace wick::autograd
