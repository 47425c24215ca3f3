#include "models/memory/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "engine/autograd/node.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "engine/optim/flat_optimizers.h"
#include "runtime/error.h"

namespace wick {
namespace {

int64_t round_up_to_block(int64_t n) {
  return (n + quantization_block_size - 1) / quantization_block_size * quantization_block_size;
}

bool is_16bit(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16; }

struct FlatLayout {
  int64_t n_8bit = 0;  // elements of the 8-bit region (padded)
  int64_t n_flat = 0;  // all elements (padded)
};

// engine/optim's layout: parameters keeping 8-bit state first, each padded to 256 elements.
FlatLayout flat_layout(const std::vector<int64_t>& numels, const std::string& optimizer) {
  FlatLayout layout;
  for (int64_t n : numels) {
    const int64_t padded = round_up_to_block(n);
    if (optimizer == "adamw8bit" && use_8bit_state(n)) layout.n_8bit += padded;
    layout.n_flat += padded;
  }
  return layout;
}

// This rank's owned range (zero_partition when sharded), the largest of all ranks' state.
std::vector<FlatRange> owned_ranges(int64_t n_flat, int world_size, bool sharded) {
  if (!sharded) return {{0, n_flat}};
  return zero_partition(n_flat, world_size);
}

// The gradient store's bytes for one parameter (engine/autograd/backward.cpp store_dtype).
int64_t store_bytes(const ParameterInfo& p) { return p.numel * (is_16bit(p.dtype) ? 4 : dtype_size(p.dtype)); }

// The dtype holding most of `bytes_by_dtype`.
DType main_dtype(const std::map<DType, int64_t>& bytes_by_dtype) {
  DType best = DType::F32;
  int64_t most = -1;
  for (const auto& [dtype, bytes] : bytes_by_dtype)
    if (bytes > most) most = bytes, best = dtype;
  return best;
}

// The step's high-water mark (see the header) for one activation profile.
int64_t step_peak(const std::vector<ParameterInfo>& parameters, const ActivationProfile& profile,
                  const MemoryInputs& in, int64_t fixed, int64_t gradient_store, int64_t step_workspace) {
  // Each segment's share of the gradient store: backward fills it from the last segment to the first.
  const auto& segments = profile.segments;
  std::vector<int64_t> store_of(segments.size(), 0);
  for (const ParameterInfo& p : parameters) {
    if (!p.trainable) continue;
    size_t owner = 0;  // parameters no segment names count from the start of backward
    bool found = false;
    for (size_t k = 0; k < segments.size() && !found; ++k)
      for (const std::string& prefix : segments[k].parameter_prefixes)
        if (p.name.compare(0, prefix.size(), prefix) == 0) {
          owner = k;
          found = true;
          break;
        }
    if (!found) owner = segments.empty() ? 0 : segments.size() - 1;
    if (!store_of.empty()) store_of[owner] += store_bytes(p);
  }
  int64_t kept_so_far = 0, peak = 0;
  std::vector<int64_t> store_from(segments.size() + 1, 0);  // store bytes of segments k.. (filled by then)
  for (size_t k = segments.size(); k-- > 0;) store_from[k] = store_from[k + 1] + store_of[k];
  for (size_t k = 0; k < segments.size(); ++k) {
    kept_so_far += segments[k].kept;
    // Accumulating over micro-steps, the store holds every gradient from the first micro-step on.
    const int64_t store = in.gradient_accumulation > 1 ? gradient_store : store_from[k + 1];
    peak = std::max(peak, kept_so_far + segments[k].recomputed + segments[k].workspace + store);
  }
  peak = std::max(peak, gradient_store + step_workspace);
  return fixed + peak;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<ParameterInfo> planned_parameters(const std::vector<ParameterInfo>& parameters, const MemoryInputs& in,
                                              int64_t* swapped_bytes, int64_t* buffer_bytes,
                                              int64_t* sharded_bytes) {
  const auto n_blocks = static_cast<int64_t>(in.block_paths.size());
  WICK_CHECK_KIND(Config, in.blocks_to_swap <= n_blocks, "train.blocks_to_swap ", in.blocks_to_swap,
                  " is more than the model's ", n_blocks, " blocks");
  auto block_of = [&](const std::string& name) -> int64_t {
    for (int64_t b = 0; b < n_blocks; ++b) {
      const std::string& path = in.block_paths[static_cast<size_t>(b)];
      if (name.size() > path.size() && name.compare(0, path.size(), path) == 0 && name[path.size()] == '.') return b;
    }
    return -1;
  };
  const int64_t first_swapped = n_blocks - std::max<int64_t>(0, in.blocks_to_swap);
  std::vector<int64_t> host_bytes(static_cast<size_t>(n_blocks), 0), packed(static_cast<size_t>(n_blocks), 0);
  std::vector<std::map<DType, int64_t>> packed_dtypes(static_cast<size_t>(n_blocks));
  std::vector<ParameterInfo> out;
  auto place = [&](const ParameterInfo& p, int64_t block) {
    if (in.shard_weights && block >= 0 && !p.trainable) {
      int64_t& end = packed[static_cast<size_t>(block)];
      end = (end + 255) / 256 * 256 + p.numel * dtype_size(p.dtype);  // each tensor at a 256-byte boundary
      packed_dtypes[static_cast<size_t>(block)][p.dtype] += p.numel * dtype_size(p.dtype);
    } else if (block >= first_swapped && block >= 0 && !p.trainable) {
      host_bytes[static_cast<size_t>(block)] += p.numel * dtype_size(p.dtype);
    } else {
      out.push_back(p);
    }
  };
  for (const ParameterInfo& p : parameters) {
    const int64_t block = block_of(p.name);
    if (in.float8 && block >= 0 && !p.trainable && is_floating(p.dtype) && p.shape.size() == 2 &&
        ends_with(p.name, ".weight")) {
      ParameterInfo codes = p;
      codes.dtype = DType::U8;
      const int64_t n_scales = in.float8_per_row ? p.shape[0] : 1;
      ParameterInfo scale{.name = p.name.substr(0, p.name.size() - 7) + ".weight_scale", .numel = n_scales,
                          .dtype = DType::F32, .trainable = false, .shape = {n_scales}};
      place(codes, block);
      place(scale, block);
    } else {
      place(p, block);
    }
  }
  int64_t swapped = 0, largest = 0;
  for (int64_t bytes : host_bytes) swapped += bytes, largest = std::max(largest, bytes);
  if (swapped_bytes) *swapped_bytes = swapped;
  if (buffer_bytes) *buffer_bytes = in.blocks_to_swap > 0 ? 2 * largest : 0;
  if (in.shard_weights) {
    const int64_t n = std::max(1, in.weight_shard_ranks > 0 ? in.weight_shard_ranks : in.world_size);
    int64_t whole = 0, largest_packed = 0, host = 0, largest_host = 0;
    for (int64_t b = 0; b < n_blocks; ++b) {
      int64_t bytes = packed[static_cast<size_t>(b)];
      if (bytes == 0) continue;
      bytes = (bytes + 4 * n - 1) / (4 * n) * (4 * n);
      whole += bytes, largest_packed = std::max(largest_packed, bytes);
      if (b >= first_swapped) {  // the shard in host memory; its device copy lives while its gather runs
        host += bytes / n, largest_host = std::max(largest_host, bytes / n);
        continue;
      }
      // Counted in the dtype most of the block's bytes are in (what the start-up line names).
      const DType dtype = main_dtype(packed_dtypes[static_cast<size_t>(b)]);
      const int64_t numel = (bytes / n + dtype_size(dtype) - 1) / dtype_size(dtype);
      out.push_back({.name = in.block_paths[static_cast<size_t>(b)] + ".(shard)", .numel = numel, .dtype = dtype,
                     .trainable = false, .shape = {numel}});
    }
    if (swapped_bytes) *swapped_bytes = host;
    if (buffer_bytes) *buffer_bytes = 2 * largest_packed + largest_host;
    if (sharded_bytes) *sharded_bytes = whole;
  }
  return out;
}

int64_t optimizer_state_bytes(const std::vector<int64_t>& trainable_numels, const std::string& optimizer,
                              bool sgd_momentum, int world_size, bool sharded) {
  WICK_CHECK_KIND(Config, optimizer == "adamw8bit" || optimizer == "adamw" || optimizer == "sgd",
                  "memory estimate: unknown optimizer \"", optimizer, "\"; valid names: adamw, adamw8bit, sgd");
  const FlatLayout layout = flat_layout(trainable_numels, optimizer);
  int64_t most = 0;
  for (const FlatRange& r : owned_ranges(layout.n_flat, world_size, sharded)) {
    const int64_t own_8bit = std::max<int64_t>(0, std::min(r.end, layout.n_8bit) - r.begin);
    const int64_t own_32bit = (r.end - r.begin) - own_8bit;
    int64_t bytes = 0;
    if (optimizer == "sgd") {
      bytes = sgd_momentum ? 4 * (r.end - r.begin) : 0;
    } else {
      // 8-bit: u8 codes for m and v, one f32 absmax per 256-element block of each; 32-bit: f32 m and v.
      bytes = 2 * own_8bit + 2 * 4 * n_quantization_blocks(own_8bit) + 8 * own_32bit;
    }
    most = std::max(most, bytes);
  }
  return most;
}

MemoryEstimate estimate_training_memory(const std::vector<ParameterInfo>& all_parameters,
                                        const ActivationProfile& with_checkpointing,
                                        const ActivationProfile& without_checkpointing, const MemoryInputs& in) {
  WICK_CHECK_KIND(Config, in.batch_size > 0 && in.world_size > 0 && in.gradient_accumulation > 0,
                  "memory estimate: batch size, ranks and gradient accumulation must be positive");
  MemoryEstimate m;
  m.checkpointing = in.gradient_checkpointing;
  const std::vector<ParameterInfo> parameters =
      planned_parameters(all_parameters, in, &m.swapped_weights, &m.swap_buffers, &m.sharded_weights);
  if (in.shard_weights) m.shard_ranks = in.weight_shard_ranks > 0 ? in.weight_shard_ranks : in.world_size;
  std::map<DType, int64_t> frozen_by_dtype, trainable_by_dtype;
  std::vector<int64_t> trainable_numels;
  // Float8 weights dequantize one at a time, swapped ones too (their device copy).
  MemoryInputs unswapped = in;
  unswapped.blocks_to_swap = 0;
  unswapped.shard_weights = false;
  for (const ParameterInfo& p : planned_parameters(all_parameters, unswapped))
    if (p.dtype == DType::U8 && p.shape.size() == 2 && !p.trainable) {
      m.n_float8 += p.numel;
      m.dequantize_workspace = std::max(m.dequantize_workspace, p.numel * dtype_size(in.compute_dtype));
    }
  for (const ParameterInfo& p : parameters) {
    const int64_t bytes = p.numel * dtype_size(p.dtype);
    if (p.trainable) {
      m.trainable_weights += bytes;
      m.n_trainable += p.numel;
      m.gradient_store += store_bytes(p);
      trainable_by_dtype[p.dtype] += bytes;
      trainable_numels.push_back(p.numel);
      for (const char* adapter_part : {".lora_down.", ".lora_up.", ".dora_scale", ".magnitude"})
        if (p.name.find(adapter_part) != std::string::npos) m.adapters = true;
    } else {
      m.frozen_weights += bytes;
      m.n_frozen += p.numel;
      frozen_by_dtype[p.dtype] += bytes;
    }
  }
  m.frozen_dtype = main_dtype(frozen_by_dtype);
  m.trainable_dtype = main_dtype(trainable_by_dtype);

  const bool sharded = in.shard_optimizer;
  const FlatLayout layout = flat_layout(trainable_numels, in.optimizer);
  m.master_weights = 4 * layout.n_flat;
  m.gradient_buffer = 4 * layout.n_flat;
  m.optimizer_state = optimizer_state_bytes(trainable_numels, in.optimizer, in.sgd_momentum, in.world_size, sharded);
  if (sharded) {
    // engine/distributed/zero.cpp: a send buffer of one range and a receive buffer of every rank's,
    // kept from the first step on, for the masters (granule 1) and the clipping norm's row sums
    // (granule 256, when the flat buffer has more than 65,536 elements).
    const int64_t chunk = zero_partition(layout.n_flat, in.world_size).front().end;
    m.shard_buffers = 4 * chunk * (1 + in.world_size);
    if (layout.n_flat > 65536) m.shard_buffers += 4 * (chunk / quantization_block_size) * (1 + in.world_size);
  }
  // The optimizer step's temporaries (engine/optim/optimizer.cpp): on the CPU the squares of the
  // flat gradient for the clipping norm (and the scaled gradient when clipping), one f32 flat
  // buffer at a time; on CUDA a fused pass leaves one f32 value per 256-element row.
  const bool fused = in.device.is_cuda() && layout.n_flat > 65536;
  m.step_workspace = fused ? 4 * (layout.n_flat / quantization_block_size) : 4 * layout.n_flat;

  // The batches in flight, then the objective's f32 latents x0, x_t and target and the model's
  // input in the compute dtype (models/diffusion/objective.cpp).
  const int64_t latent_elements = in.batch_size * in.latent_channels * in.latent_height * in.latent_width;
  const int64_t batch_bytes =
      in.batch_size * (4 * in.text_length * in.text_dim + 4 * in.pooled_dim + in.text_length) + 4 * latent_elements;
  const int64_t e = dtype_size(in.compute_dtype);
  m.inputs = in.batches_in_flight * batch_bytes + 3 * 4 * latent_elements + (e != 4 ? e * latent_elements : 0);
  if (in.min_snr_weights) m.inputs += 4 * latent_elements;  // the weighted loss keeps the squared error

  const ActivationProfile& chosen = in.gradient_checkpointing ? with_checkpointing : without_checkpointing;
  const ActivationProfile& other = in.gradient_checkpointing ? without_checkpointing : with_checkpointing;
  m.activations = chosen.peak_bytes();
  m.activations_other = other.peak_bytes();
  const int64_t fixed = m.frozen_weights + m.trainable_weights + m.master_weights + m.gradient_buffer +
                        m.optimizer_state + m.shard_buffers + m.inputs + m.swap_buffers + m.dequantize_workspace;
  m.total = step_peak(parameters, chosen, in, fixed, m.gradient_store, m.step_workspace);
  m.total_other = step_peak(parameters, other, in, fixed, m.gradient_store, m.step_workspace);
  return m;
}

namespace {

std::vector<ParameterInfo> model_parameters(const DiffusionModel& model) {
  std::vector<ParameterInfo> parameters;
  for (const auto& [name, tensor] : model.named_parameters())
    parameters.push_back({name, tensor.numel(), tensor.dtype(), autograd::requires_grad(tensor), tensor.shape()});
  return parameters;
}

// The estimate of `model` with other parameters (a dtype or rank changed) and activations in `dtype`.
MemoryEstimate estimate_with(const DiffusionModel& model, const std::vector<ParameterInfo>& parameters, MemoryInputs in,
                             DType dtype) {
  in.compute_dtype = dtype;
  if (in.block_paths.empty()) in.block_paths = model.block_paths();
  ActivationShape shape{.batch = in.batch_size,
                        .latent_height = in.latent_height,
                        .latent_width = in.latent_width,
                        .text_length = in.text_length,
                        .dtype = dtype,
                        .device = in.device};
  return estimate_training_memory(parameters, model.activation_profile(shape, true),
                                  model.activation_profile(shape, false), in);
}

}  // namespace

MemoryEstimate estimate_training_memory(const DiffusionModel& model, const MemoryInputs& in) {
  return estimate_with(model, model_parameters(model), in, model.dtype());
}

std::string format_bytes(int64_t bytes) {
  WICK_CHECK(bytes >= 0, "format_bytes: negative byte count ", bytes);
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1e12)
    std::snprintf(text, sizeof text, "%.1f TB", b / 1e12);
  else if (b >= 1e9)
    std::snprintf(text, sizeof text, "%.1f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(text, sizeof text, "%.1f MB", b / 1e6);
  else if (b >= 1e3)
    std::snprintf(text, sizeof text, "%.1f kB", b / 1e3);
  else
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  return text;
}

std::string describe(const MemoryEstimate& m) {
  std::string line = "weights " + format_bytes(m.frozen_weights + (m.adapters ? 0 : m.trainable_weights));
  if (m.n_frozen > 0 && (m.adapters || m.n_trainable == 0)) {
    line += std::string(" (frozen ") + (m.frozen_dtype == DType::U8 ? "float8" : dtype_name(m.frozen_dtype)) + ")";
  } else if (m.n_frozen == 0) {
    line += std::string(" (trainable ") + dtype_name(m.trainable_dtype) + ")";
  } else {
    line += std::string(" (") + dtype_name(m.frozen_dtype) + ", partly trainable)";
  }
  if (m.adapters)
    line += " + adapters " + format_bytes(m.trainable_weights) + " (" + dtype_name(m.trainable_dtype) + ")";
  line += " + f32 masters " + format_bytes(m.master_weights);
  line += " + gradients " + format_bytes(m.gradient_buffer + m.gradient_store);
  line += " + optimizer state " + format_bytes(m.optimizer_state + m.shard_buffers);
  line += " + activations " + format_bytes(m.activations) + " (checkpointing " + (m.checkpointing ? "on; " : "off; ") +
          format_bytes(m.activations_other) + (m.checkpointing ? " off)" : " on)");
  line += " + batches and workspace " + format_bytes(m.inputs + m.step_workspace);
  if (m.sharded_weights > 0)
    line += " + gathered-block buffers " + format_bytes(m.swap_buffers) + " (the weights: this rank's 1/" +
            std::to_string(m.shard_ranks) + " of " + format_bytes(m.sharded_weights) + " of block weights" +
            (m.swapped_weights > 0 ? ", " + format_bytes(m.swapped_weights) + " of it in host memory)" : ")");
  else if (m.swap_buffers > 0)
    line += " + swapped-block buffers " + format_bytes(m.swap_buffers) + " (" + format_bytes(m.swapped_weights) +
            " of block weights in host memory)";
  if (m.dequantize_workspace > 0) line += " + float8 dequantization " + format_bytes(m.dequantize_workspace);
  const int64_t sum = m.frozen_weights + m.trainable_weights + m.master_weights + m.gradient_buffer + m.gradient_store +
                      m.optimizer_state + m.shard_buffers + m.activations + m.inputs + m.step_workspace +
                      m.swap_buffers + m.dequantize_workspace;
  line += " = " + format_bytes(m.total);
  if (static_cast<double>(m.total) < 0.98 * static_cast<double>(sum))
    line += " at the peak (below the sum: backward frees activations as it makes gradients)";
  return line;
}

std::vector<std::string> memory_suggestions(const DiffusionModel& model, const MemoryInputs& in,
                                            const MemoryEstimate& estimate, const MemoryAdvice& advice,
                                            int64_t capacity) {
  struct Option {
    std::string text;
    int64_t total;
  };
  std::vector<Option> options;
  auto consider = [&](const std::string& text, int64_t total) {
    if (static_cast<double>(total) < 0.99 * static_cast<double>(estimate.total)) options.push_back({text, total});
  };
  const std::vector<ParameterInfo> parameters = model_parameters(model);
  if (!in.gradient_checkpointing) consider("train.gradient_checkpointing: true", estimate.total_other);
  // The largest smaller batch that fits (else 1), with accumulation keeping the samples per step.
  for (int64_t batch = in.batch_size / 2; batch >= 1; batch /= 2) {
    MemoryInputs smaller = in;
    smaller.batch_size = batch;
    const int64_t total = estimate_with(model, parameters, smaller, model.dtype()).total;
    if (total <= capacity || batch == 1) {
      const int64_t accumulation = in.gradient_accumulation * (in.batch_size / batch);
      consider("train.batch_size: " + std::to_string(batch) + " with train.gradient_accumulation: " +
                   std::to_string(accumulation) + " (the same samples per step)",
               total);
      break;
    }
  }
  if (in.optimizer == "adamw") {
    MemoryInputs eight_bit = in;
    eight_bit.optimizer = "adamw8bit";
    consider("train.optimizer: adamw8bit", estimate_with(model, parameters, eight_bit, model.dtype()).total);
  }
  // More ranks with the optimizer state sharded: the smallest world size (up to 64) that fits.
  for (int world = std::max(2, in.world_size * 2); world <= 64; world *= 2) {
    MemoryInputs sharded = in;
    sharded.world_size = world;
    sharded.shard_optimizer = true;
    const int64_t total = estimate_with(model, parameters, sharded, model.dtype()).total;
    if (total <= capacity || world == 64) {
      consider(std::to_string(world) + " ranks with distributed.shard_optimizer: true (per rank)", total);
      break;
    }
  }
  if (advice.model_dtype == DType::F32 && model.dtype() == DType::F32) {
    std::vector<ParameterInfo> bf16 = parameters;
    for (ParameterInfo& p : bf16)
      if (!p.trainable || !estimate.adapters) p.dtype = DType::BF16;
    consider("model.dtype: bf16", estimate_with(model, bf16, in, DType::BF16).total);
  }
  if (estimate.adapters && advice.lora_rank > 1) {
    const int64_t rank = advice.lora_rank / 2;
    std::vector<ParameterInfo> lower = parameters;
    for (ParameterInfo& p : lower)
      if (p.name.find(".lora_down.") != std::string::npos || p.name.find(".lora_up.") != std::string::npos)
        p.numel = p.numel / advice.lora_rank * rank;
    consider("network.linear: " + std::to_string(rank) + " (a lower LoRA rank)",
             estimate_with(model, lower, in, model.dtype()).total);
  }
  const size_t n_blocks = model.block_paths().size();
  if (n_blocks > 0 && !in.float8) {
    MemoryInputs float8 = in;
    float8.float8 = true;
    consider("model.quantize: float8 (the blocks' frozen weights as e4m3 with f32 scales)",
             estimate_with(model, parameters, float8, model.dtype()).total);
  }
  if (n_blocks > 0 && in.blocks_to_swap < static_cast<int64_t>(n_blocks)) {
    // The fewest swapped blocks that fit (swapping needs checkpointing), else all of them.
    MemoryInputs swapped = in;
    swapped.gradient_checkpointing = true;
    for (auto n = std::max<int64_t>(1, in.blocks_to_swap + 1); n <= static_cast<int64_t>(n_blocks); ++n) {
      swapped.blocks_to_swap = n;
      const int64_t total = estimate_with(model, parameters, swapped, model.dtype()).total;
      if (total <= capacity || n == static_cast<int64_t>(n_blocks)) {
        consider("train.blocks_to_swap: " + std::to_string(n) +
                     (in.gradient_checkpointing ? "" : " with train.gradient_checkpointing: true") +
                     " (those blocks' frozen weights in host memory, streamed in as they run)",
                 total);
        break;
      }
    }
  }
  std::stable_sort(options.begin(), options.end(), [&](const Option& a, const Option& b) {
    const bool a_fits = a.total <= capacity, b_fits = b.total <= capacity;
    return a_fits != b_fits ? a_fits : a.total < b.total;
  });
  std::vector<std::string> out;
  for (const Option& o : options)
    out.push_back(o.text + ": " + format_bytes(o.total) + (o.total <= capacity ? " (fits)" : ""));
  return out;
}

}  // namespace wick
