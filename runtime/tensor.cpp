#include "runtime/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "runtime/ops/copy.h"

namespace wick {
namespace {

uint64_t next_tensor_id() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}

// Shape with one -1 resolved against n elements.
Shape infer_shape(Shape shape, int64_t n, const std::string& who) {
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      WICK_CHECK(infer_at < 0, who, ": only one extent may be -1, got ", shape);
      infer_at = static_cast<int64_t>(i);
    } else {
      WICK_CHECK(shape[i] >= 0, who, ": negative extent in ", shape);
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    WICK_CHECK(known != 0 && n % known == 0, who, ": cannot infer -1 in ", shape, " for ", n, " elements");
    shape[infer_at] = n / known;
  }
  WICK_CHECK(numel(shape) == n, who, ": shape ", shape, " does not hold ", n, " elements");
  return shape;
}

// Strides for viewing (shape, strides) as new_shape without copying, or empty if impossible.
// Walks groups of old axes that map onto groups of new axes with the same element count; each
// old group must be contiguous within itself.
bool view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape, Strides& out) {
  out.assign(new_shape.size(), 0);
  if (numel(shape) == 0) {
    out = contiguous_strides(new_shape);
    return true;
  }
  size_t old_i = 0, new_i = 0;
  const size_t n_old = shape.size(), n_new = new_shape.size();
  while (old_i < n_old || new_i < n_new) {
    // Skip extent-1 axes: they can take any stride.
    if (new_i < n_new && new_shape[new_i] == 1) {
      out[new_i++] = 1;
      continue;
    }
    if (old_i < n_old && shape[old_i] == 1) {
      ++old_i;
      continue;
    }
    if (old_i >= n_old || new_i >= n_new) return false;
    size_t old_end = old_i, new_end = new_i;
    int64_t old_count = shape[old_end++], new_count = new_shape[new_end++];
    while (old_count != new_count) {
      if (old_count < new_count) {
        if (old_end >= n_old) return false;
        old_count *= shape[old_end++];
      } else {
        if (new_end >= n_new) return false;
        new_count *= new_shape[new_end++];
      }
    }
    // Old axes [old_i, old_end) must be contiguous with respect to each other (ignoring extent 1).
    int64_t inner_stride = -1, last_stride = -1, last_extent = 1;
    for (size_t a = old_end; a-- > old_i;) {
      if (shape[a] == 1) continue;
      if (last_stride >= 0 && strides[a] != last_stride * last_extent) return false;
      if (inner_stride < 0) inner_stride = strides[a];
      last_stride = strides[a];
      last_extent = shape[a];
    }
    int64_t stride = inner_stride < 0 ? 1 : inner_stride;  // stride of the innermost old axis
    for (size_t a = new_end; a-- > new_i;) {
      out[a] = stride;
      stride *= new_shape[a];
    }
    old_i = old_end;
    new_i = new_end;
  }
  return true;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t extent : shape) WICK_CHECK(extent >= 0, "empty: negative extent in shape ", shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::allocate(device, static_cast<size_t>(wick::numel(shape)) * dtype_size(dtype));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->id = next_tensor_id();
  return Tensor(std::move(impl));
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
                            int64_t offset, DType dtype) {
  WICK_CHECK(storage != nullptr, "from_storage: null storage");
  WICK_CHECK(shape.size() == strides.size(), "from_storage: shape ", shape, " and strides ", strides,
             " differ in rank");
  int64_t lowest = offset, highest = offset;
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    WICK_CHECK(shape[i] >= 0, "from_storage: negative extent in ", shape);
    if (shape[i] == 0) empty = true;
    if (strides[i] >= 0)
      highest += (shape[i] - 1) * strides[i];
    else
      lowest += (shape[i] - 1) * strides[i];
  }
  if (!empty) {
    int64_t n_elements = static_cast<int64_t>(storage->bytes() / dtype_size(dtype));
    WICK_CHECK(lowest >= 0 && highest < n_elements, "from_storage: view ", shape, " strides ", strides,
               " offset ", offset, " reaches outside a storage of ", n_elements, " ", dtype_name(dtype),
               " elements");
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  impl->id = next_tensor_id();
  return Tensor(std::move(impl));
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  WICK_CHECK(static_cast<int64_t>(values.size()) == wick::numel(shape), "from_vector: ", values.size(),
             " values do not fill shape ", shape);
  Tensor host = empty(shape, dtype_of<T>::value, Device::cpu());
  if (!values.empty()) std::memcpy(host.data(), values.data(), values.size() * sizeof(T));
  return host.to(device);
}

Tensor Tensor::scalar(double value, DType dtype, Device device) {
  return from_vector<double>({value}, {}).to(dtype).to(device);
}

int64_t Tensor::size(int64_t axis) const { return shape()[normalize_axis(axis, dim(), "size")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape().size(); i-- > 0;) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::data() const {
  return static_cast<char*>(impl().storage->data()) + impl().offset * dtype_size(impl().dtype);
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype())) + shape_string(shape()) + " " + device().str();
}

Tensor Tensor::make_view(Shape shape, Strides strides, int64_t offset) const {
  auto view = std::make_shared<TensorImpl>();
  view->storage = impl().storage;
  view->shape = std::move(shape);
  view->strides = std::move(strides);
  view->offset = offset;
  view->dtype = impl().dtype;
  view->id = next_tensor_id();
  return Tensor(std::move(view));
}

Tensor Tensor::view(Shape new_shape) const {
  new_shape = infer_shape(std::move(new_shape), numel(), "view");
  Strides new_strides;
  WICK_CHECK(view_strides(shape(), strides(), new_shape, new_strides), "view: a ", describe(), " with strides ",
             strides(), " cannot be viewed as ", new_shape, " without a copy (use reshape)");
  return make_view(std::move(new_shape), std::move(new_strides), offset());
}

Tensor Tensor::reshape(Shape new_shape) const {
  new_shape = infer_shape(std::move(new_shape), numel(), "reshape");
  Strides new_strides;
  if (view_strides(shape(), strides(), new_shape, new_strides))
    return make_view(std::move(new_shape), std::move(new_strides), offset());
  return contiguous().view(std::move(new_shape));
}

Tensor Tensor::flatten(int64_t start_axis, int64_t end_axis) const {
  if (dim() == 0) return reshape({1});
  int64_t start = normalize_axis(start_axis, dim(), "flatten");
  int64_t end = normalize_axis(end_axis, dim(), "flatten");
  WICK_CHECK(start <= end, "flatten: start axis ", start_axis, " is after end axis ", end_axis);
  Shape new_shape(shape().begin(), shape().begin() + start);
  int64_t merged = 1;
  for (int64_t a = start; a <= end; ++a) merged *= shape()[a];
  new_shape.push_back(merged);
  new_shape.insert(new_shape.end(), shape().begin() + end + 1, shape().end());
  return reshape(std::move(new_shape));
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  WICK_CHECK(static_cast<int64_t>(order.size()) == dim(), "permute: order of length ", order.size(),
             " for a tensor of rank ", dim());
  Shape new_shape(order.size());
  Strides new_strides(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t axis = normalize_axis(order[i], dim(), "permute");
    WICK_CHECK(!seen[axis], "permute: axis ", axis, " appears twice in the order");
    seen[axis] = true;
    new_shape[i] = shape()[axis];
    new_strides[i] = strides()[axis];
  }
  return make_view(std::move(new_shape), std::move(new_strides), offset());
}

Tensor Tensor::transpose(int64_t axis_a, int64_t axis_b) const {
  std::vector<int64_t> order(dim());
  for (int64_t i = 0; i < dim(); ++i) order[i] = i;
  std::swap(order[normalize_axis(axis_a, dim(), "transpose")], order[normalize_axis(axis_b, dim(), "transpose")]);
  return permute(order);
}

Tensor Tensor::narrow(int64_t axis, int64_t start, int64_t length) const {
  int64_t a = normalize_axis(axis, dim(), "narrow");
  if (start < 0) start += shape()[a];
  WICK_CHECK(start >= 0 && length >= 0 && start + length <= shape()[a], "narrow: range [", start, ", ",
             start + length, ") is outside axis ", a, " of extent ", shape()[a], " in ", describe());
  Shape new_shape = shape();
  new_shape[a] = length;
  return make_view(std::move(new_shape), strides(), offset() + start * strides()[a]);
}

Tensor Tensor::slice(int64_t axis, int64_t start, int64_t end, int64_t step) const {
  int64_t a = normalize_axis(axis, dim(), "slice");
  int64_t extent = shape()[a];
  WICK_CHECK(step > 0, "slice: step must be positive, got ", step);
  if (start < 0) start += extent;
  if (end < 0) end += extent;
  start = std::clamp<int64_t>(start, 0, extent);
  end = std::clamp<int64_t>(end, start, extent);
  Shape new_shape = shape();
  Strides new_strides = strides();
  new_shape[a] = (end - start + step - 1) / step;
  new_strides[a] = strides()[a] * step;
  return make_view(std::move(new_shape), std::move(new_strides), offset() + start * strides()[a]);
}

Tensor Tensor::select(int64_t axis, int64_t index) const {
  int64_t a = normalize_axis(axis, dim(), "select");
  if (index < 0) index += shape()[a];
  WICK_CHECK(index >= 0 && index < shape()[a], "select: index ", index, " is outside axis ", a, " of extent ",
             shape()[a]);
  return narrow(a, index, 1).squeeze(a);
}

Tensor Tensor::expand(const Shape& target) const {
  WICK_CHECK(target.size() >= shape().size(), "expand: cannot expand ", describe(), " to fewer axes ", target);
  size_t lead = target.size() - shape().size();
  Shape new_shape(target.size());
  Strides new_strides(target.size(), 0);
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      WICK_CHECK(target[i] >= 0, "expand: new leading axis needs an extent, got ", target);
      new_shape[i] = target[i];
      continue;
    }
    int64_t extent = shape()[i - lead];
    int64_t wanted = target[i] == -1 ? extent : target[i];
    WICK_CHECK(wanted == extent || extent == 1, "expand: cannot expand ", describe(), " to ", target,
               " (axis ", i, ": ", extent, " -> ", wanted, ")");
    new_shape[i] = wanted;
    new_strides[i] = wanted == extent ? strides()[i - lead] : 0;
  }
  return make_view(std::move(new_shape), std::move(new_strides), offset());
}

Tensor Tensor::squeeze(int64_t axis) const {
  int64_t a = normalize_axis(axis, dim(), "squeeze");
  if (dim() == 0 || shape()[a] != 1) return *this;
  Shape new_shape = shape();
  Strides new_strides = strides();
  new_shape.erase(new_shape.begin() + a);
  new_strides.erase(new_strides.begin() + a);
  return make_view(std::move(new_shape), std::move(new_strides), offset());
}

Tensor Tensor::squeeze() const {
  Shape new_shape;
  Strides new_strides;
  for (int64_t i = 0; i < dim(); ++i)
    if (shape()[i] != 1) {
      new_shape.push_back(shape()[i]);
      new_strides.push_back(strides()[i]);
    }
  return make_view(std::move(new_shape), std::move(new_strides), offset());
}

Tensor Tensor::unsqueeze(int64_t axis) const {
  int64_t a = axis < 0 ? axis + dim() + 1 : axis;
  WICK_CHECK(a >= 0 && a <= dim(), "unsqueeze: axis ", axis, " is out of range for rank ", dim());
  Shape new_shape = shape();
  Strides new_strides = strides();
  int64_t stride = a < dim() ? strides()[a] * shape()[a] : 1;
  new_shape.insert(new_shape.begin() + a, 1);
  new_strides.insert(new_strides.begin() + a, stride);
  return make_view(std::move(new_shape), std::move(new_strides), offset());
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor out = empty(shape(), dtype(), target);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target, device());
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& source) const { copy_into(*this, source); }

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = to(Device::cpu()).to(dtype_of<T>::value).contiguous();
  std::vector<T> values(static_cast<size_t>(numel()));
  if (!values.empty()) std::memcpy(values.data(), host.data(), values.size() * sizeof(T));
  return values;
}

double Tensor::item() const {
  WICK_CHECK(numel() == 1, "item: tensor ", describe(), " has ", numel(), " elements, not 1");
  return to_vector<double>()[0];
}

#define WICK_INSTANTIATE(T)                                                                    \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&, Device);         \
  template std::vector<T> Tensor::to_vector<T>() const;
WICK_INSTANTIATE(float)
WICK_INSTANTIATE(double)
WICK_INSTANTIATE(bf16)
WICK_INSTANTIATE(f16)
WICK_INSTANTIATE(int32_t)
WICK_INSTANTIATE(int64_t)
WICK_INSTANTIATE(uint8_t)
WICK_INSTANTIATE(int8_t)
#undef WICK_INSTANTIATE

}  // namespace wick
