#include "tests/models/step_memory.h"

#include <vector>

#include "engine/autograd/backward.h"
#include "engine/config/train_config.h"
#include "engine/optim/optimizer.h"
#include "models/diffusion/objective.h"
#include "runtime/memory.h"
#include "runtime/ops/random.h"

namespace wick {

Tensor random_tensor(const Shape& shape, uint64_t key) { return randn(shape, RngStream{key, 1}); }

Measurement measure_step(const std::function<std::shared_ptr<DiffusionModel>()>& build, const StepShape& s,
                         const std::string& optimizer_name, bool checkpointing, const StepPlan& plan) {
  const Device cpu = Device::cpu();
  Measurement out;
  const int64_t before = memory_stats(cpu).current_bytes;
  std::shared_ptr<DiffusionModel> model = build();
  model->set_gradient_checkpointing(checkpointing);
  MemoryInputs in{.batch_size = s.batch, .latent_height = s.size, .latent_width = s.size,
                  .text_length = s.text_length, .text_dim = s.text_dim, .latent_channels = s.channels,
                  .pooled_dim = s.pooled_dim, .gradient_checkpointing = checkpointing, .optimizer = optimizer_name,
                  .batches_in_flight = 1};
  in.blocks_to_swap = plan.blocks_to_swap;
  in.shard_weights = plan.shard_weights;
  in.world_size = plan.world_size;
  out.estimate = estimate_training_memory(*model, in);
  out.profile = model->activation_profile({.batch = s.batch, .latent_height = s.size, .latent_width = s.size,
                                           .text_length = s.text_length, .dtype = model->dtype()},
                                          checkpointing);
  reset_peak_memory(cpu);
  {
    std::unique_ptr<Optimizer> optimizer = make_optimizer(optimizer_name, model->trainable_parameters(), {});
    Tensor latents = random_tensor({s.batch, s.channels, s.size, s.size}, 1);
    diffusion::Conditioning cond{.context = random_tensor({s.batch, s.text_length, s.text_dim}, 2),
                                 .pooled = random_tensor({s.batch, s.pooled_dim}, 3)};
    Objective objective{TrainSection{}};
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < s.batch; ++i) ids.push_back(i);
    ObjectiveBatch ob = objective.make(latents, ids, 0);
    autograd::GradientStore grads;
    {
      Tensor x_in = ob.x_t.to(model->dtype());
      const int64_t before_forward = memory_stats(cpu).current_bytes;
      Tensor loss = objective.loss(model->predict(x_in, ob.model_time, cond), ob);
      out.kept = memory_stats(cpu).current_bytes - before_forward;
      autograd::backward(loss, grads, autograd::GradientMode::Accumulate);
    }
    optimizer->step(grads, 1e-4f);
  }
  out.peak = memory_stats(cpu).peak_bytes - before;
  return out;
}

flux::FluxConfig tiny_flux(int64_t heads, DType dtype) {
  flux::FluxConfig c{.in_channels = 64, .hidden_size = 128, .num_heads = heads, .depth = 2, .depth_single = 2,
                     .context_dim = 256, .vec_dim = 64, .dtype = dtype};
  if (heads == 2) c.axes_dim = {8, 28, 28};  // head width 64
  return c;
}

}  // namespace wick
