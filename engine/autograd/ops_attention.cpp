#include "engine/autograd/ops_attention.h"

#include "engine/autograd/node.h"
#include "runtime/ops/attention.h"

namespace wick::autograd {
namespace {

class AttentionNode : public Node {
 public:
  AttentionNode(Tensor q, Tensor k, Tensor v, Tensor mask, Tensor out, Tensor logsumexp, std::optional<double> scale,
                bool is_causal, bool need_q, bool need_k, bool need_v)
      : q_(std::move(q)),
        k_(std::move(k)),
        v_(std::move(v)),
        mask_(std::move(mask)),
        out_(std::move(out)),
        logsumexp_(std::move(logsumexp)),
        scale_(scale),
        is_causal_(is_causal),
        need_{need_q, need_k, need_v} {}
  const char* name() const override { return "scaled_dot_product_attention"; }
  // With P = softmax(scale q k^T + mask), out = P v:
  // dv = P^T dout, dq = scale dS k, dk = scale dS^T q, dS = P * (dout v^T - rowsum(dout * out)).
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    AttentionGrads g =
        wick::scaled_dot_product_attention_backward(grad[0], q_, k_, v_, out_, logsumexp_, mask_, scale_, is_causal_);
    return {need_[0] ? g.grad_q : Tensor(), need_[1] ? g.grad_k : Tensor(), need_[2] ? g.grad_v : Tensor()};
  }
  void release() override { q_ = k_ = v_ = mask_ = out_ = logsumexp_ = Tensor(); }

 private:
  Tensor q_, k_, v_, mask_, out_, logsumexp_;
  std::optional<double> scale_;
  bool is_causal_;
  bool need_[3];
};

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    std::optional<double> scale, bool is_causal) {
  AttentionResult r = wick::scaled_dot_product_attention(q, k, v, mask, scale, is_causal);
  Tensor out = r.out;
  if (needs_grad({q, k, v})) {
    // out is saved through a handle of its own: detach(out) would return out's handle itself (it has
    // no autograd state yet), which record() then points at this node, a cycle.
    Tensor saved_out = Tensor::from_storage(out.storage(), out.shape(), out.strides(), out.offset(), out.dtype());
    record(std::make_shared<AttentionNode>(detach(q), detach(k), detach(v), detach(mask), saved_out, r.logsumexp,
                                           scale, is_causal, requires_grad(q), requires_grad(k), requires_grad(v)),
           {q, k, v}, out);
  }
  return out;
}

}  // namespace wick::autograd
