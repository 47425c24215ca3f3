// The memory a training run needs on each rank, estimated before step 1 from the model (with its
// adapters already applied) and what the run knows: batch, largest bucket, text length, dtype,
// checkpointing, optimizer, ranks. `wick train` prints it and refuses a run that cannot fit.
//
//   MemoryInputs in{.batch_size = 1, .latent_height = 128, .latent_width = 128, .text_length = 512,
//                   .gradient_checkpointing = true, .optimizer = "adamw8bit"};
//   MemoryEstimate m = estimate_training_memory(*model, in);
//   std::printf("%s\n", describe(m).c_str());   // "weights 23.8 GB (frozen bf16) + adapters ... = ..."
//   if (m.total > capacity) ... suggestions(m, in) ...
//
// What is counted (docs/training.md "Memory"): every parameter (numel x dtype size); the
// optimizer's flat f32 master and gradient buffers (every trainable parameter, padded to 256
// elements); the per-parameter gradients backward accumulates (f32 for 16-bit parameters); the
// optimizer state as engine/optim allocates it (8-bit blocks of 256 with f32 absmax, 32-bit state
// below 4096 elements, padding included; the largest shard when sharded); the activations block by
// block (DiffusionModel::activation_profile); the batches in flight and the optimizer step's
// temporaries. The total is the high-water mark of a step (forward, backward, optimizer step),
// which is below the sum of the parts when backward builds gradients while it frees activations.
// tests/models/memory_estimate_test.cpp checks it against memory_stats on the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/memory/activation_memory.h"
#include "models/architecture.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

namespace wick {

// What the run knows before step 1 (per rank).
struct MemoryInputs {
  int64_t batch_size = 1;              // micro-batch per rank
  int64_t latent_height = 0;           // the largest latent bucket
  int64_t latent_width = 0;
  int64_t text_length = 0;             // L of the dataset's text embeddings
  int64_t text_dim = 0;                // D (0 = not known: the batches' text is not counted)
  int64_t latent_channels = 0;         // C (0 = not known)
  int64_t pooled_dim = 0;
  DType compute_dtype = DType::F32;     // the model's dtype (the estimate of a built model takes its own)
  bool gradient_checkpointing = false;
  std::string optimizer = "adamw8bit";  // adamw8bit | adamw | sgd
  bool sgd_momentum = true;            // sgd keeps a momentum buffer (train.betas[0] > 0)
  int world_size = 1;
  bool shard_optimizer = false;        // ZeRO-1: distributed.shard_optimizer where the step loop shards
                                       // (several ranks, or NCCL on one GPU)
  int64_t gradient_accumulation = 1;
  bool min_snr_weights = false;        // train.min_snr_gamma > 0: the loss keeps one more latent-sized tensor
  Device device = Device::cpu();       // CUDA: the optimizer's norm and clipping run fused, without temporaries
  int64_t batches_in_flight = 4;       // the prefetcher's two ready batches, the one it loads, the one in use
  // The memory plan's choices (models/memory/memory_plan.h), applied to the parameters as counted:
  // float8: every frozen floating 2-d `.weight` inside a block counts as U8 codes plus f32 scales (one
  // per row, or one); weights already float8 stay. blocks_to_swap: the frozen parameters of the last N
  // of `block_paths` count in host memory, and two of those blocks' worth of device buffers are added
  // (engine/block_swap.h).
  // shard_weights (distributed.shard: weights): every block's frozen parameters count as this rank's
  // 1/world_size of the packed block (engine/block_swap.h "Sharded"), plus two gathered blocks' buffers.
  bool float8 = false;
  bool float8_per_row = true;
  int64_t blocks_to_swap = 0;
  bool shard_weights = false;
  int weight_shard_ranks = 0;  // the ranks a block's weights are cut among (distributed.shard_group: node: a
                               // node's); 0 = world_size
  std::vector<std::string> block_paths = {};  // the blocks in execution order; a built model's estimate
                                              // takes its DiffusionModel::block_paths when empty
};

// A parameter as the estimate sees it (from a model, or from shapes alone).
struct ParameterInfo {
  std::string name;
  int64_t numel = 0;
  DType dtype = DType::F32;
  bool trainable = false;
  Shape shape = {};  // (a float8 weight's scales are one per row of a 2-d weight)
};

// Bytes per rank.
struct MemoryEstimate {
  int64_t frozen_weights = 0;        // frozen parameters in their dtype
  int64_t trainable_weights = 0;     // trainable parameters (adapters, or the whole model) in their dtype
  int64_t master_weights = 0;        // the optimizer's flat f32 copy of every trainable parameter (padded)
  int64_t gradient_buffer = 0;       // the optimizer's flat f32 gradient (padded)
  int64_t gradient_store = 0;        // the per-parameter gradients backward accumulates (f32 for 16-bit)
  int64_t optimizer_state = 0;       // moments / momentum of this rank's range (the largest shard)
  int64_t shard_buffers = 0;         // ZeRO-1's all-gather buffers (send and receive, f32)
  int64_t activations = 0;           // activations' high-water mark with this run's checkpointing
  int64_t activations_other = 0;     // ... with the other setting
  int64_t inputs = 0;                // batches in flight, the objective's latent-sized tensors
  int64_t step_workspace = 0;        // the optimizer step's temporaries
  int64_t total = 0;                 // the step's high-water mark
  int64_t total_other = 0;           // ... with the other checkpointing setting
  int64_t swapped_weights = 0;       // frozen block weights in host memory (block swapping; not in total)
  int64_t swap_buffers = 0;          // the device copies of two swapped blocks (sharded: two gathered blocks)
  int64_t sharded_weights = 0;       // weight sharding: the blocks' frozen bytes, packed, over all ranks (this
                                     // rank's 1/N of them are in frozen_weights)
  int shard_ranks = 1;
  int64_t dequantize_workspace = 0;  // the largest float8 weight dequantized to the compute dtype
  int64_t n_float8 = 0;              // float8 weights (elements)
  bool checkpointing = false;        // the setting `activations` and `total` are for
  DType frozen_dtype = DType::F32;   // the dtype most frozen bytes are in ("frozen bf16")
  DType trainable_dtype = DType::F32;
  int64_t n_trainable = 0;           // trainable parameters (elements)
  int64_t n_frozen = 0;
  bool adapters = false;             // the trainable parameters are LoRA / DoRA adapters
};

// The estimate for `model` as built for the run (adapters applied, trainable flags set, parameters
// in the compute dtype).
MemoryEstimate estimate_training_memory(const DiffusionModel& model, const MemoryInputs& in);
// The same from a parameter list and the two activation profiles (checkpointing on and off), for
// models that are not built (models/flux/flux_memory.h estimates full-size Flux this way).
MemoryEstimate estimate_training_memory(const std::vector<ParameterInfo>& parameters,
                                        const ActivationProfile& with_checkpointing,
                                        const ActivationProfile& without_checkpointing, const MemoryInputs& in);

// The parameters as `in` counts them: float8 and host placement applied (see MemoryInputs), every
// swapped parameter's name under one of the last in.blocks_to_swap block paths. `swapped_bytes`
// receives the host bytes, `buffer_bytes` the two blocks' device buffers. With in.shard_weights each block's
// frozen parameters become one parameter "<block>.(shard)" of its packed bytes / world_size (in the dtype most
// of them are in), and
// `sharded_bytes` receives the packed bytes of all blocks.
std::vector<ParameterInfo> planned_parameters(const std::vector<ParameterInfo>& parameters, const MemoryInputs& in,
                                              int64_t* swapped_bytes = nullptr, int64_t* buffer_bytes = nullptr,
                                              int64_t* sharded_bytes = nullptr);

// Bytes of optimizer state `optimizer` allocates for these trainable parameter sizes (in the order
// the optimizer receives them) on the rank holding the most of it: engine/optim's layout (8-bit
// parameters first, each padded to 256 elements) cut into zero_partition ranges when sharded.
int64_t optimizer_state_bytes(const std::vector<int64_t>& trainable_numels, const std::string& optimizer,
                              bool sgd_momentum, int world_size, bool sharded);

// "23.8 GB" (decimal units, as the start-up line prints).
std::string format_bytes(int64_t bytes);
// One line: "weights 23.8 GB (frozen bf16) + adapters ... = 34.5 GB".
std::string describe(const MemoryEstimate& estimate);

// What would lower the estimate for a run that does not fit: each suggestion names the setting and
// the estimate it would give, and is listed only when it lowers the estimate (e.g. turning on
// train.gradient_checkpointing, a smaller train.batch_size, adamw8bit instead of adamw, more ranks
// with distributed.shard_optimizer, bf16 weights, a lower LoRA rank). `capacity` is what the run
// must fit in.
struct MemoryAdvice {
  int64_t lora_rank = 0;           // network.linear of a lora / dora run (0 = none)
  DType model_dtype = DType::F32;  // model.dtype as configured
};
std::vector<std::string> memory_suggestions(const DiffusionModel& model, const MemoryInputs& in,
                                            const MemoryEstimate& estimate, const MemoryAdvice& advice,
                                            int64_t capacity);

}  // namespace wick
