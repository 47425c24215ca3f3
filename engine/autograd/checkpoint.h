// Gradient checkpointing as a transform: run `fn` without keeping its activations, and run it
// again during backward to get its gradients.
//
//   auto out = checkpoint([&](const std::vector<Tensor>& x) { return std::vector<Tensor>{block->forward(x[0])}; },
//                         {h}, block->trainable_parameters_list());
//   Tensor y = checkpoint(*block, h);      // the same for a one-input module
//
// Only the inputs are kept. Backward recomputes `fn` with recording on, differentiates it with the
// incoming gradients, and hands the gradients of the inputs and of `parameters` (every trainable
// tensor `fn` uses besides its inputs) back to the outer pass. `fn` must be deterministic given its
// inputs: random numbers it draws through the engine's RNG cursor (engine/autograd/rng_state.h)
// are replayed. On the CPU the gradients equal those of the plain run bitwise when each parameter is
// used only inside one checkpointed call.
#pragma once

#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace wick {
class Module;
}

namespace wick::autograd {

using CheckpointFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& parameters);
// module.forward(x), checkpointed, with the module's trainable parameters.
Tensor checkpoint(Module& module, const Tensor& x);

// True on this thread while a checkpoint's backward reruns its function (the recomputation), for
// code that acts differently then: block swapping (engine/block_swap.h) prefetches the previous block
// instead of the next.
bool recomputing();

}  // namespace wick::autograd
