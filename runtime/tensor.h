// Tensor: a cheap handle to ref-counted storage plus shape, strides, offset, dtype and device.
//
//   Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
//   Tensor t = x.transpose(0, 1);            // a view: no copy, strides {1, 3}
//   Tensor c = t.contiguous();               // copies because t is not contiguous
//   Tensor g = x.to(Device::cuda(0));        // explicit, checked device copy
//   Tensor h = x.to(DType::BF16);            // cast, round to nearest even
//   std::vector<float> v = h.to_vector<float>();
//
// Views (view/reshape, permute/transpose, narrow/slice, expand, squeeze/unsqueeze) share storage.
// Copying a Tensor copies the handle: both handles name the same tensor (same id()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/shape.h"
#include "runtime/storage.h"

namespace wick {

struct AutogradMeta;  // defined by engine/; the runtime only carries it

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::F32;
  uint64_t id = 0;
  std::shared_ptr<AutogradMeta> autograd;
};

class Tensor {
 public:
  Tensor() = default;

  // ---- construction ----
  // Uninitialized contiguous memory.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  // A view onto existing storage; checks that every element addressed lies inside it.
  static Tensor from_storage(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
                             int64_t offset, DType dtype);
  // Copies host values into a new tensor of dtype_of<T> on `device`.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
  // A 0-d tensor holding `value` converted to dtype.
  static Tensor scalar(double value, DType dtype = DType::F32, Device device = Device::cpu());

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t axis) const;
  int64_t numel() const { return wick::numel(impl().shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  bool is_contiguous() const;
  // Unique per tensor (views get their own id); stable for the tensor's life.
  uint64_t id() const { return impl().id; }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  // Address of element 0 (storage base + offset).
  void* data() const;
  template <typename T>
  T* data_as() const {
    WICK_CHECK(dtype_of<T>::value == dtype(), "data_as: tensor is ", dtype_name(dtype()), ", asked for ",
               dtype_name(dtype_of<T>::value));
    return static_cast<T*>(data());
  }
  // "f32[2, 3] cpu"
  std::string describe() const;

  // ---- views (never copy) ----
  // New shape with the same number of elements; one extent may be -1. Fails if the strides do
  // not allow a view (use reshape).
  Tensor view(Shape shape) const;
  // A view when the strides allow it, else a contiguous copy.
  Tensor reshape(Shape shape) const;
  Tensor flatten(int64_t start_axis = 0, int64_t end_axis = -1) const;
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor transpose(int64_t axis_a, int64_t axis_b) const;
  Tensor narrow(int64_t axis, int64_t start, int64_t length) const;
  // Python-style slice [start:end:step] along axis; negative start/end count from the end.
  Tensor slice(int64_t axis, int64_t start, int64_t end, int64_t step = 1) const;
  // Index `index` along axis, removing the axis.
  Tensor select(int64_t axis, int64_t index) const;
  // Broadcast to `shape` (stride 0 on expanded axes); -1 keeps an extent.
  Tensor expand(const Shape& shape) const;
  Tensor squeeze(int64_t axis) const;
  Tensor squeeze() const;  // all extent-1 axes
  Tensor unsqueeze(int64_t axis) const;

  // ---- copies ----
  Tensor contiguous() const;        // self when already contiguous
  Tensor clone() const;             // always a new contiguous tensor
  Tensor to(Device device) const;   // self when already there
  Tensor to(DType dtype) const;     // self when already that dtype
  // Copies `source` (broadcast to this shape, cast to this dtype, any device) into this tensor,
  // which may be a strided view.
  void copy_from(const Tensor& source) const;

  // ---- host access ----
  template <typename T>
  std::vector<T> to_vector() const;  // converts to T; works from any device
  double item() const;              // the single element as double

  // ---- autograd slot (used by engine/) ----
  const std::shared_ptr<AutogradMeta>& autograd() const { return impl().autograd; }
  void set_autograd(std::shared_ptr<AutogradMeta> meta) const { impl().autograd = std::move(meta); }

  bool same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  TensorImpl& impl() const {
    WICK_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  Tensor make_view(Shape shape, Strides strides, int64_t offset) const;

  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace wick
