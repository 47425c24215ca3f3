// Writes the checkpoints the `wick checkpoint inspect` CLI test inspects:
//   <run>/checkpoints/step_00000001  valid (adamw8bit state, one rank)
//   <run>/checkpoints/step_00000002  valid, then one byte of model.safetensors flipped
//   <run>/checkpoints/step_00000003  valid with two optimizer shard files (world size 2)
// Usage: wick_checkpoint_fixture RUN_DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/optim/optimizer.h"

int main(int argc, char** argv) {
  using namespace wick;
  namespace fs = std::filesystem;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s RUN_DIR\n", argv[0]);
    return 2;
  }
  fs::path run = argv[1];
  fs::remove_all(run);
  std::vector<float> values(6000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.001f * static_cast<float>(i % 997) - 0.3f;
  Tensor weight = Tensor::from_vector<float>(values, {60, 100});
  Tensor bias = Tensor::from_vector<float>(std::vector<float>(values.begin(), values.begin() + 100), {100});
  autograd::set_requires_grad(weight, true, "weight");
  autograd::set_requires_grad(bias, true, "bias");
  NamedParameters params = {{"layer.weight", weight}, {"layer.bias", bias}};
  auto optimizer = make_optimizer("adamw8bit", params);
  OptimizerLayout layout = optimizer_layout(*optimizer);
  for (int64_t step = 1; step <= 3; ++step) {
    autograd::GradientStore grads;
    grads.add(weight, weight.clone(), true);
    grads.add(bias, bias.clone(), true);
    optimizer->step(grads, 1e-3f);
    CheckpointWriter writer(run, step);
    writer.write_model(params);
    if (step < 3) {
      writer.write_optimizer(*optimizer);
    } else {
      for (const OptimizerShard& shard :
           split_optimizer_state(optimizer->state_tensors(), layout, zero_partition(layout.flat_numel, 2)))
        writer.write_optimizer_shard(shard);
    }
    writer.write_training_state({.step = step, .epoch = 0, .sample_cursor = 16 * step, .seed = 7});
    writer.commit(step < 3 ? 1 : 2, "fixture");
  }
  fs::path model = run / "checkpoints" / "step_00000002" / "model.safetensors";
  std::fstream file(model, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(-10, std::ios::end);
  char c = 0;
  file.read(&c, 1);
  c = static_cast<char>(c ^ 1);
  file.seekp(-10, std::ios::end);
  file.write(&c, 1);
  return 0;
}
