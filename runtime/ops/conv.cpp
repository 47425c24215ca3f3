#include "runtime/ops/conv.h"

#include "runtime/cpu/conv.h"
#include "runtime/cuda/conv.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/ops/conv_geometry.h"
#include "runtime/ops/copy.h"

namespace wick {
namespace {

// x in `dtype`, contiguous (a view of x when it already is).
Tensor ready(const Tensor& x, DType dtype) { return x.dtype() == dtype ? x.contiguous() : cast(x, dtype); }

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups) {
  WICK_CHECK(x.defined() && weight.defined(), "conv2d: undefined tensor");
  WICK_CHECK(x.dim() == 4 && weight.dim() == 4, "conv2d: expected x [N, C, H, W] and weight [O, C/groups, kh, kw], got ",
             x.describe(), " and ", weight.describe());
  WICK_CHECK(is_floating(x.dtype()) && is_floating(weight.dtype()), "conv2d: floating dtypes only, got ",
             x.describe(), " and ", weight.describe());
  WICK_CHECK(x.device() == weight.device(), "conv2d: x ", x.describe(), " and weight ", weight.describe(),
             " on different devices");
  WICK_CHECK(groups >= 1, "conv2d: groups must be >= 1, got ", groups);
  WICK_CHECK(stride[0] >= 1 && stride[1] >= 1 && dilation[0] >= 1 && dilation[1] >= 1 && padding[0] >= 0 &&
                 padding[1] >= 0,
             "conv2d: stride and dilation must be >= 1 and padding >= 0, got stride {", stride[0], ", ", stride[1],
             "}, padding {", padding[0], ", ", padding[1], "}, dilation {", dilation[0], ", ", dilation[1], "}");
  Conv2dGeometry g;
  g.n = x.size(0);
  g.c = x.size(1);
  g.h = x.size(2);
  g.w = x.size(3);
  g.o = weight.size(0);
  g.kh = weight.size(2);
  g.kw = weight.size(3);
  g.sh = stride[0];
  g.sw = stride[1];
  g.ph = padding[0];
  g.pw = padding[1];
  g.dh = dilation[0];
  g.dw = dilation[1];
  g.groups = groups;
  WICK_CHECK(g.c > 0 && g.c % groups == 0 && g.o % groups == 0, "conv2d: channels of x ", x.describe(),
             " and outputs of weight ", weight.describe(), " must be positive multiples of groups = ", groups);
  WICK_CHECK(weight.size(1) == g.c / groups, "conv2d: channel mismatch: x ", x.describe(), " has ", g.c,
             " channels, so weight ", weight.describe(), " needs ", g.c / groups, " input channels per group (groups = ",
             groups, "), got ", weight.size(1));
  WICK_CHECK(g.kh > 0 && g.kw > 0, "conv2d: empty kernel ", weight.describe());
  if (bias.defined()) {
    WICK_CHECK(bias.dim() == 1 && bias.size(0) == g.o, "conv2d: bias ", bias.describe(), " does not match weight ",
               weight.describe());
    WICK_CHECK(is_floating(bias.dtype()), "conv2d: floating dtypes only, got bias ", bias.describe());
    WICK_CHECK(bias.device() == x.device(), "conv2d: bias ", bias.describe(), " on a different device than x ",
               x.describe());
  }
  g.ho = conv_output_extent(g.h, g.kh, g.sh, g.ph, g.dh);
  g.wo = conv_output_extent(g.w, g.kw, g.sw, g.pw, g.dw);
  WICK_CHECK(g.ho > 0 && g.wo > 0, "conv2d: input ", x.describe(), " is smaller than the dilated kernel ",
             weight.describe(), " (padding {", g.ph, ", ", g.pw, "}, dilation {", g.dh, ", ", g.dw, "})");

  DType dtype = promote_types(x.dtype(), weight.dtype());
  Device device = x.device();
  DType compute = dtype;
  if (device.is_cpu() && (dtype == DType::BF16 || dtype == DType::F16)) compute = DType::F32;
  Tensor x_ready = ready(x, compute), weight_ready = ready(weight, compute);
  Tensor bias_ready = bias.defined() ? ready(bias, compute) : Tensor();
  const void* bias_data = bias.defined() ? bias_ready.data() : nullptr;
  Tensor y = Tensor::empty({g.n, g.o, g.ho, g.wo}, compute, device);
  if (device.is_cpu()) {
    cpu::conv2d(g, compute, x_ready.data(), weight_ready.data(), bias_data, y.data());
  } else {
    cuda::set_device(device.index);
    cuda::conv2d(g, compute, x_ready.data(), weight_ready.data(), bias_data, y.data(), current_stream(device).handle);
  }
  return compute == dtype ? y : cast(y, dtype);
}

// ---- gradients ----

namespace {

// Validates the shapes of a backward call and returns the forward's geometry.
Conv2dGeometry geometry_for(const char* op, const Tensor& grad_out, const Tensor& other, const Shape& x_shape,
                            const Shape& weight_shape, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                            std::array<int64_t, 2> dilation, int64_t groups) {
  WICK_CHECK(grad_out.defined() && other.defined(), op, ": undefined tensor");
  WICK_CHECK(is_floating(grad_out.dtype()) && is_floating(other.dtype()), op, ": floating dtypes only, got ",
             grad_out.describe(), " and ", other.describe());
  WICK_CHECK(grad_out.device() == other.device(), op, ": ", grad_out.describe(), " and ", other.describe(),
             " on different devices");
  WICK_CHECK(x_shape.size() == 4 && weight_shape.size() == 4 && grad_out.dim() == 4, op,
             ": expected x [N, C, H, W], weight [O, C/groups, kh, kw] and grad_out [N, O, Ho, Wo], got x ", x_shape,
             ", weight ", weight_shape, ", grad_out ", grad_out.describe());
  WICK_CHECK(groups >= 1, op, ": groups must be >= 1, got ", groups);
  WICK_CHECK(stride[0] >= 1 && stride[1] >= 1 && dilation[0] >= 1 && dilation[1] >= 1 && padding[0] >= 0 &&
                 padding[1] >= 0,
             op, ": stride and dilation must be >= 1 and padding >= 0");
  Conv2dGeometry g;
  g.n = x_shape[0];
  g.c = x_shape[1];
  g.h = x_shape[2];
  g.w = x_shape[3];
  g.o = weight_shape[0];
  g.kh = weight_shape[2];
  g.kw = weight_shape[3];
  g.sh = stride[0];
  g.sw = stride[1];
  g.ph = padding[0];
  g.pw = padding[1];
  g.dh = dilation[0];
  g.dw = dilation[1];
  g.groups = groups;
  WICK_CHECK(g.c > 0 && g.c % groups == 0 && g.o > 0 && g.o % groups == 0 && weight_shape[1] == g.c / groups, op,
             ": x ", x_shape, " and weight ", weight_shape, " do not match with groups = ", groups);
  WICK_CHECK(g.kh > 0 && g.kw > 0, op, ": empty kernel ", weight_shape);
  g.ho = conv_output_extent(g.h, g.kh, g.sh, g.ph, g.dh);
  g.wo = conv_output_extent(g.w, g.kw, g.sw, g.pw, g.dw);
  WICK_CHECK(g.ho > 0 && g.wo > 0, op, ": input ", x_shape, " is smaller than the dilated kernel ", weight_shape);
  Shape expected{g.n, g.o, g.ho, g.wo};
  WICK_CHECK(grad_out.shape() == expected, op, ": grad_out ", grad_out.describe(), " should have shape ", expected,
             " for x ", x_shape, " and weight ", weight_shape);
  return g;
}

// The dtype the kernels run in: 16-bit types are computed in f32 on the CPU.
DType kernel_type(DType dtype, Device device) {
  return device.is_cpu() && (dtype == DType::BF16 || dtype == DType::F16) ? DType::F32 : dtype;
}

}  // namespace

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& x_shape,
                             std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                             std::array<int64_t, 2> dilation, int64_t groups) {
  const char* op = "conv2d_backward_input";
  WICK_CHECK(weight.defined() && weight.dim() == 4, op, ": expected weight [O, C/groups, kh, kw], got ",
             weight.defined() ? weight.describe() : std::string("undefined"));
  Conv2dGeometry g =
      geometry_for(op, grad_out, weight, x_shape, weight.shape(), stride, padding, dilation, groups);
  DType dtype = promote_types(grad_out.dtype(), weight.dtype());
  Device device = grad_out.device();
  DType compute = kernel_type(dtype, device);
  Tensor grad_ready = ready(grad_out, compute), weight_ready = ready(weight, compute);
  Tensor grad_x = Tensor::empty(x_shape, compute, device);
  if (device.is_cpu()) {
    cpu::conv2d_backward_input(g, compute, grad_ready.data(), weight_ready.data(), grad_x.data());
  } else {
    cuda::set_device(device.index);
    cuda::conv2d_backward_input(g, compute, grad_ready.data(), weight_ready.data(), grad_x.data(),
                                current_stream(device).handle);
  }
  return compute == dtype ? grad_x : cast(grad_x, dtype);
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                              std::array<int64_t, 2> dilation, int64_t groups) {
  const char* op = "conv2d_backward_weight";
  WICK_CHECK(x.defined() && x.dim() == 4, op, ": expected x [N, C, H, W], got ",
             x.defined() ? x.describe() : std::string("undefined"));
  Conv2dGeometry g = geometry_for(op, grad_out, x, x.shape(), weight_shape, stride, padding, dilation, groups);
  DType dtype = promote_types(grad_out.dtype(), x.dtype());
  Device device = grad_out.device();
  DType compute = kernel_type(dtype, device);
  Tensor grad_ready = ready(grad_out, compute), x_ready = ready(x, compute);
  Tensor grad_weight = Tensor::empty(weight_shape, compute, device);
  if (device.is_cpu()) {
    cpu::conv2d_backward_weight(g, compute, grad_ready.data(), x_ready.data(), grad_weight.data());
  } else {
    cuda::set_device(device.index);
    cuda::conv2d_backward_weight(g, compute, grad_ready.data(), x_ready.data(), grad_weight.data(),
                                 current_stream(device).handle);
  }
  return compute == dtype ? grad_weight : cast(grad_weight, dtype);
}
}  // namespace wick
