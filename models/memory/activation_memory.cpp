#include "models/memory/activation_memory.h"

#include <algorithm>
#include <map>
#include <memory>

#include "engine/autograd/node.h"
#include "models/nn/adapter.h"
#include "models/nn/lora.h"

namespace wick {

int64_t ActivationProfile::peak_bytes() const {
  int64_t kept_so_far = 0, peak = 0;
  for (const ActivationSegment& s : segments) {
    kept_so_far += s.kept;
    peak = std::max(peak, kept_so_far + s.recomputed + s.workspace);
  }
  return peak;
}

int64_t ActivationProfile::forward_flops() const {
  int64_t total = 0;
  for (const ActivationSegment& s : segments) total += s.forward_flops;
  return total;
}

int64_t ActivationProfile::kept_bytes() const {
  int64_t total = 0;
  for (const ActivationSegment& s : segments) total += s.kept;
  return total;
}

LayerTrainingOf layer_training_of(const Module& model) {
  auto table = std::make_shared<std::map<std::string, LayerTraining>>();
  for (const auto& [path, module] : model.named_modules()) {
    LayerTraining t;
    if (auto adapter = std::dynamic_pointer_cast<nn::Adapter>(module)) {
      t.rank = adapter->options().rank;
      t.dora = std::dynamic_pointer_cast<nn::DoRALinear>(module) != nullptr;
      t.dropout = adapter->options().dropout;
    } else {
      for (const auto& [name, tensor] : module->named_parameters())
        if (name.find('.') == std::string::npos && autograd::requires_grad(tensor)) t.trainable = true;
    }
    (*table)[path] = t;
  }
  return [table](const std::string& path) {
    auto found = table->find(path);
    return found == table->end() ? LayerTraining{} : found->second;
  };
}

int64_t math_bytes(DType dtype, Device device) {
  const bool sixteen_bit = dtype == DType::BF16 || dtype == DType::F16;
  return device.is_cpu() && sixteen_bit ? 4 : dtype_size(dtype);
}

int64_t matmul_staging(int64_t rows, int64_t in, int64_t out, DType dtype, Device device) {
  const bool sixteen_bit = dtype == DType::BF16 || dtype == DType::F16;
  return device.is_cpu() && sixteen_bit ? (rows * in + in * out + rows * out) * 4 : 0;
}

LinearActivations linear_activations(const LayerTraining& training, int64_t rows, int64_t in, int64_t out, DType dtype,
                                     Device device, bool input_requires_grad) {
  LinearActivations a;
  const int64_t e = dtype_size(dtype), y = rows * out * e;
  auto staging = [&](int64_t n_rows, int64_t n_in, int64_t n_out) {
    return matmul_staging(n_rows, n_in, n_out, dtype, device);
  };
  if (training.rank > 0 && training.dora) {
    a.keeps_input = true;
    a.kept = (4 + e) * out * in;
    // W in f32 and up·down before they are summed; the product.
    a.transient = std::max(2 * 4 * out * in, y + staging(rows, in, out));
  } else if (training.rank > 0) {
    const int64_t r = training.rank;
    if (training.dropout > 0.0) {
      a.kept += rows * in * (e + 1);  // the dropped copy and its u8 mask; the input itself is not kept
    } else {
      a.keeps_input = true;
    }
    a.kept += rows * r * e;                        // down(x), kept by the up node
    if (e != 4) a.kept += (r * in + out * r) * e;  // the f32 factors cast to the compute dtype
    // base(x), then up(down(x)) and its scaled copy beside it, then the sum.
    a.transient =
        std::max({y + staging(rows, in, out), y + staging(rows, in, r), 2 * y + staging(rows, r, out), 4 * y});
  } else {
    a.keeps_input = training.trainable;
    a.transient = y + staging(rows, in, out);
  }
  a.adapter = training.rank > 0;
  a.flops = 2 * rows * in * out + (training.rank > 0 ? 2 * rows * training.rank * (in + out) : 0);
  a.output_requires_grad = input_requires_grad || training.trains();
  return a;
}

void ActivationCount::keep(bool kept, int64_t bytes) {
  if (kept) internal += bytes;
  note(0);
}

void ActivationCount::note(int64_t transient) { forward_peak = std::max(forward_peak, internal + held + transient); }

void ActivationCount::linear(const LinearActivations& a) {
  adapted = adapted || a.adapter;
  internal += a.kept;
  flops += a.flops;
  note(a.transient);
}

int64_t ActivationCount::forward_excess() const { return std::max<int64_t>(0, forward_peak - internal); }

ActivationSegment block_segment(const std::string& name, const ActivationCount& c, bool checkpointing,
                                int64_t input_bytes, int64_t output_bytes, int64_t widest, const WorkspaceRows& rows) {
  ActivationSegment s{.name = name, .parameter_prefixes = {name + "."}, .forward_flops = c.flops};
  const double n_rows = c.adapted ? rows.adapted : rows.plain;
  s.workspace = std::max(static_cast<int64_t>(n_rows * static_cast<double>(widest)), c.forward_excess());
  if (checkpointing) {
    s.kept = input_bytes;
    s.recomputed = c.internal + 2 * output_bytes;
  } else {
    s.kept = c.input + c.internal;
  }
  return s;
}

ActivationSegment adaln_final_layer_segment(const LayerTrainingOf& of, const FinalLayerSizes& z, const TokenStream& x,
                                            bool vec_grad) {
  // Its LayerNorm keeps the whole last stream (through the narrow view) and the image rows' statistics; then the
  // loss keeps pred - target in f32 (mse_loss). For a moment: the prediction, its f32 copy and the squared error.
  const int64_t h = z.hidden, e = dtype_size(z.dtype);
  ActivationCount final_layer;
  LinearActivations ada =
      linear_activations(of("final_layer.adaLN_modulation.1"), z.batch, h, 2 * h, z.dtype, z.device, vec_grad);
  final_layer.linear(ada);
  final_layer.keep(x.requires_grad, x.rows * h * e + 2 * 4 * z.img_rows);
  final_layer.keep(x.requires_grad || ada.output_requires_grad, z.batch * 2 * h * e);
  final_layer.keep(ada.output_requires_grad, z.img_rows * h * e);  // LayerNorm output, kept by modulate
  LinearActivations linear = linear_activations(of("final_layer.linear"), z.img_rows, h, z.out_features, z.dtype,
                                                z.device, x.requires_grad || ada.output_requires_grad);
  final_layer.keep(linear.keeps_input, z.img_rows * h * e);
  final_layer.linear(linear);
  const int64_t prediction = z.img_rows * z.out_features;  // elements of the prediction
  final_layer.internal += 4 * prediction;                  // pred - target
  const int64_t moment = prediction * (e + (e != 4 ? 4 : 0) + 4) + 2 * z.img_rows * h * e;
  return {.name = "final_layer",
          .parameter_prefixes = {"final_layer."},
          .kept = final_layer.internal,
          .workspace = std::max(moment, final_layer.forward_excess()),
          .forward_flops = final_layer.flops};
}

bool count_embedder_mlp(ActivationCount& c, const LayerTraining& first, const LayerTraining& second, int64_t batch,
                        int64_t in, int64_t width, DType dtype, Device device) {
  const int64_t e = dtype_size(dtype);
  LinearActivations a = linear_activations(first, batch, in, width, dtype, device, false);
  c.keep(a.keeps_input, batch * in * e);
  c.linear(a);
  c.keep(a.output_requires_grad, batch * width * e);  // kept by SiLU
  LinearActivations b = linear_activations(second, batch, width, width, dtype, device, a.output_requires_grad);
  c.keep(b.keeps_input, batch * width * e);
  c.linear(b);
  return b.output_requires_grad;
}

int64_t attention_transient(int64_t q_rows, int64_t kv_rows, int64_t width, DType dtype, Device device) {
  const bool sixteen_bit = dtype == DType::BF16 || dtype == DType::F16;
  return device.is_cpu() && sixteen_bit ? (2 * q_rows + 2 * kv_rows) * width * 4 : 0;
}

bool attention_merge_copies(int64_t heads, int64_t head_dim, DType dtype, Device device, bool masked) {
  if (heads == 1) return false;
  const bool sixteen_bit = dtype == DType::BF16 || dtype == DType::F16;
  if (device.is_cpu()) return sixteen_bit;
  const bool cudnn = sixteen_bit && !masked && head_dim % 8 == 0 && head_dim <= 128;
  return !cudnn;
}

}  // namespace wick
