// What the generic step loop (engine/train/step_loop.h) asks of the thing it trains: a model whose
// trainable parameters the optimizer updates and checkpoints keep, the loss of one micro-batch, and
// hooks for the work a recipe does between steps. The loop owns the data loader, the optimizer, the
// gradient reduction, checkpoints and logs; the task knows the model and the objective.
//
//   class MyTask : public TrainingTask {
//     Module& model() override { return *net_; }
//     Tensor micro_batch_loss(const Batch& b) override { return autograd::mse_loss(net_->forward(b.latents), b.latents); }
//     std::string describe() const override { return "autoencoder"; }
//   };
//   LoopResult r = run_step_loop(task, setup, options);
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "engine/data/prefetcher.h"
#include "engine/module.h"
#include "runtime/tensor.h"

namespace wick {

class RunLog;

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;

  // The model: its trainable_parameters() are what the optimizer trains and what a checkpoint's
  // model.safetensors holds (names stable across runs). The loop calls model().train() before step 1.
  virtual Module& model() = 0;
  // The loss of one micro-batch: a 0-d f32 tensor recorded by autograd. A non-finite value makes the
  // loop skip the step (no update) on every rank.
  virtual Tensor micro_batch_loss(const Batch& batch) = 0;
  // One line for the start-up message ("DiT with 584272 parameters (584272 trainable, full)").
  virtual std::string describe() const = 0;
  // Metadata the loop adds to each checkpoint's model.safetensors.
  virtual std::map<std::string, std::string> checkpoint_metadata() const { return {}; }
  // Rank 0, right after the checkpoint of `step` is committed (exports such as a LoRA file).
  virtual void after_checkpoint(int64_t step) {}
  // Rank 0, at the end of every step (sample grids); `log` may be null. Every rank when
  // after_step_on_every_rank() (its work runs collectives, e.g. a model whose weights are sharded):
  // the other ranks get a null `log` and write nothing.
  virtual void after_step(int64_t step, bool last, RunLog* log) {}
  virtual bool after_step_on_every_rank() const { return false; }
};

}  // namespace wick
