// The diffusion training task the step loop runs: a batch of cached latents and text embeddings ->
// the objective's noised input and target -> the model's prediction -> the weighted MSE; plus the
// exports between steps (the LoRA or full-model file at each checkpoint, sample grids).
//
//   DiffusionTask task(config, model, data, run_dir, base_hash, prepare_sampling(config, data, device));
//   LoopResult r = run_step_loop(task, setup, options);
//   task.lora_file();                        // the last LoRA file written, if any
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "engine/train/train_setup.h"
#include "engine/train/training_task.h"
#include "models/architecture.h"
#include "models/diffusion/objective.h"

namespace wick {

class DiffusionTask : public TrainingTask {
 public:
  // `model` built for `config` (models/model_factory.h); `data` the opened training data; base_hash
  // the SHA-256 of the base weights file for the LoRA metadata ("" when not known); `sampler` makes the
  // sample grids (models/diffusion/sample_grid.h; null when sample.every is 0). `rank`: this process's
  // rank; with the model's weights sharded every rank samples (each block's gather is a collective) and
  // rank 0 writes and reports the grid.
  DiffusionTask(const TrainConfig& config, std::shared_ptr<DiffusionModel> model, const TrainingData& data,
                std::filesystem::path run_dir, std::string base_hash, std::shared_ptr<ImageSampler> sampler,
                int rank = 0);

  Module& model() override { return *model_; }
  Tensor micro_batch_loss(const Batch& batch) override;
  std::string describe() const override;
  std::map<std::string, std::string> checkpoint_metadata() const override;
  void after_checkpoint(int64_t step) override;
  void after_step(int64_t step, bool last, RunLog* log) override;
  bool after_step_on_every_rank() const override;

  const std::optional<std::filesystem::path>& lora_file() const { return lora_file_; }
  const std::optional<std::filesystem::path>& model_file() const { return model_file_; }
  const std::vector<std::filesystem::path>& sample_grids() const { return sample_grids_; }

 private:
  const TrainConfig& config_;
  // Multiplies the loss weights of the batch's regularization samples (Batch::is_reg) by
  // train.prior_loss_weight.
  void weigh_regularization(ObjectiveBatch& ob, const Batch& batch) const;

  std::shared_ptr<DiffusionModel> model_;
  const TrainingData& data_;
  std::filesystem::path run_dir_;
  std::string base_hash_;
  Objective objective_;
  std::shared_ptr<ImageSampler> sampler_;
  int rank_ = 0;
  std::optional<std::filesystem::path> lora_file_, model_file_;
  std::vector<std::filesystem::path> sample_grids_;
};

}  // namespace wick
