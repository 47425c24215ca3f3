// One training step's measured memory against the estimate (models/memory/memory_estimate.h), for the memory tests
// of tests/models (one process) and tests/comm (weights sharded over the ranks of an MPI group).
//
//   Measurement m = measure_step([&] { return build_my_model(); }, {.size = 16}, "adamw", /*checkpointing=*/true);
//   double ratio = double(m.estimate.total) / double(m.peak);
//
// measure_step builds the model, estimates it, then runs one step (objective, forward, backward, optimizer) on
// random inputs and records the peak of the bytes held by tensors (runtime/memory.h) above what was held before the
// model was built. Everything runs on the CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "models/architecture.h"
#include "models/flux/flux_config.h"
#include "models/memory/activation_memory.h"
#include "models/memory/memory_estimate.h"

namespace wick {

struct StepShape {
  int64_t batch = 2, channels = 16, size = 16, text_length = 16, text_dim = 256, pooled_dim = 64;
};

struct Measurement {
  int64_t peak = 0;     // the step's peak tensor bytes above what was allocated before the model
  int64_t kept = 0;     // bytes the forward left for backward (loss included)
  MemoryEstimate estimate;
  ActivationProfile profile;
};

Tensor random_tensor(const Shape& shape, uint64_t key);

// The estimate's inputs beyond the step's shape: block swapping, weight sharding and the ranks sharing the weights.
struct StepPlan {
  int64_t blocks_to_swap = 0;
  bool shard_weights = false;
  int world_size = 1;
};

Measurement measure_step(const std::function<std::shared_ptr<DiffusionModel>()>& build, const StepShape& s,
                         const std::string& optimizer_name, bool checkpointing, const StepPlan& plan = {});

// The tiny Flux of the memory tests: hidden 128 in `heads` heads, 2 double + 2 single blocks, context 256, pooled 64.
flux::FluxConfig tiny_flux(int64_t heads, DType dtype);

}  // namespace wick
