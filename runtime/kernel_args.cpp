#include "runtime/kernel_args.h"

#include "runtime/error.h"
#include "runtime/tensor.h"

namespace wick {

StridedView make_strided_view(const Shape& shape, const Strides& strides, const char* op) {
  WICK_CHECK(shape.size() <= static_cast<size_t>(max_kernel_rank), op, ": rank ", shape.size(),
             " exceeds the kernel limit of ", max_kernel_rank, " (reshape first)");
  StridedView view;
  view.rank = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    view.shape[i] = shape[i];
    view.strides[i] = strides[i];
  }
  return view;
}

StridedView strided_view(const Tensor& tensor, const char* op) {
  return make_strided_view(tensor.shape(), tensor.strides(), op);
}

void coalesce_axes(Shape& shape, const std::vector<Strides*>& operand_strides) {
  Shape new_shape;
  std::vector<Strides> new_strides(operand_strides.size());
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (shape[axis] == 1) continue;
    bool merge = !new_shape.empty();
    for (size_t k = 0; merge && k < operand_strides.size(); ++k)
      merge = new_strides[k].back() == (*operand_strides[k])[axis] * shape[axis];
    if (merge) {
      new_shape.back() *= shape[axis];
      for (size_t k = 0; k < operand_strides.size(); ++k) new_strides[k].back() = (*operand_strides[k])[axis];
    } else {
      new_shape.push_back(shape[axis]);
      for (size_t k = 0; k < operand_strides.size(); ++k) new_strides[k].push_back((*operand_strides[k])[axis]);
    }
  }
  shape = std::move(new_shape);
  for (size_t k = 0; k < operand_strides.size(); ++k) *operand_strides[k] = std::move(new_strides[k]);
}

}  // namespace wick
