#include "engine/train/grad_sync.h"

#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"

namespace wick {

void average_gradients(comm::ProcessGroup& group, const std::vector<std::pair<std::string, Tensor>>& parameters,
                       autograd::GradientStore& grads) {
  if (group.size() == 1 || parameters.empty()) return;
  const Device device = parameters.front().second.device();
  int64_t total = 0;
  for (const auto& [name, p] : parameters) total += p.numel();
  Tensor flat = zeros({total}, DType::F32, device);
  int64_t offset = 0;
  for (const auto& [name, p] : parameters) {
    Tensor g = grads.get(p);
    if (g.defined()) flat.narrow(0, offset, p.numel()).view(p.shape()).copy_from(g);
    offset += p.numel();
  }
  Tensor wire = flat.device() == group.device() ? flat : flat.to(group.device());
  group.all_reduce(wire);
  Tensor averaged = mul(wire, 1.0 / static_cast<double>(group.size()));
  if (averaged.device() != device) averaged = averaged.to(device);
  offset = 0;
  for (const auto& [name, p] : parameters) {
    grads.add(p, averaged.narrow(0, offset, p.numel()).view(p.shape()), /*overwrite=*/true);
    offset += p.numel();
  }
}

std::vector<double> all_reduce_sum(comm::ProcessGroup& group, const std::vector<double>& values) {
  if (group.size() == 1 || values.empty()) return values;
  Tensor t = Tensor::from_vector<double>(values, {static_cast<int64_t>(values.size())}, group.device());
  group.all_reduce(t);
  return t.to_vector<double>();
}

}  // namespace wick
