#include "models/diffusion/diffusion_task.h"

#include <unistd.h>

#include <cstdio>

#include "engine/train/preemption.h"
#include "models/diffusion/sample_grid.h"
#include "models/diffusion/sampling_watch.h"
#include "models/lora_files.h"
#include "models/memory/memory_estimate.h"
#include "models/model_factory.h"
#include "models/weights/float8_weights.h"
#include "runtime/ops/creation.h"

namespace fs = std::filesystem;

namespace wick {

DiffusionTask::DiffusionTask(const TrainConfig& config, std::shared_ptr<DiffusionModel> model,
                             const TrainingData& data, fs::path run_dir, std::string base_hash,
                             std::shared_ptr<ImageSampler> sampler, int rank)
    : config_(config),
      model_(std::move(model)),
      data_(data),
      run_dir_(std::move(run_dir)),
      base_hash_(std::move(base_hash)),
      objective_(config.train),
      sampler_(std::move(sampler)),
      rank_(rank) {}

bool DiffusionTask::after_step_on_every_rank() const {
  const BlockSwapper* swapper = model_->block_swapper();
  return swapper != nullptr && swapper->sharded() && swapper->shard_ranks() > 1;
}

Tensor DiffusionTask::micro_batch_loss(const Batch& batch) {
  const int64_t epoch = batch_epoch(batch);
  const uint64_t seed = static_cast<uint64_t>(config_.train.seed);
  Tensor z = training_latents(batch, config_.datasets[0].latent_sampling, seed, epoch);
  Tensor x0 = Objective::scale_latents(z, data_.dataset->attributes());
  diffusion::Conditioning cond =
      drop_captions(batch, config_.datasets[0].caption_dropout, seed, epoch);
  ObjectiveBatch ob = objective_.make(x0, batch.ids, epoch);
  weigh_regularization(ob, batch);
  Tensor x_in = ob.x_t.dtype() == model_->dtype() ? ob.x_t : ob.x_t.to(model_->dtype());
  Tensor pred = model_->predict(x_in, ob.model_time, cond);
  return objective_.loss(pred, ob);
}

void DiffusionTask::weigh_regularization(ObjectiveBatch& ob, const Batch& batch) const {
  const double weight = config_.train.prior_loss_weight;
  if (batch.is_reg.empty() || weight == 1.0) return;
  const int64_t n = static_cast<int64_t>(batch.ids.size());
  WICK_CHECK(static_cast<int64_t>(batch.is_reg.size()) == n, "DiffusionTask: ", batch.is_reg.size(),
             " regularization flags for a batch of ", n);
  std::vector<float> weights = ob.weights.defined() ? ob.weights.to_vector<float>()
                                                    : std::vector<float>(static_cast<size_t>(n), 1.0f);
  for (size_t i = 0; i < weights.size(); ++i)
    if (batch.is_reg[i]) weights[i] *= static_cast<float>(weight);
  ob.weights = Tensor::from_vector<float>(weights, {n}, ob.x_t.device());
}

std::string DiffusionTask::describe() const {
  const int64_t n_float8 = count_float8_layers(*model_);
  std::string swap_text;
  const BlockSwapper* swapper = model_->block_swapper();
  if (swapper && swapper->sharded()) {
    int64_t whole = 0, mine = 0, host = 0;
    for (int k = 0; k < swapper->n_blocks(); ++k) {
      whole += swapper->block_bytes(k), mine += swapper->shard_bytes(k);
      if (swapper->shard_in_host_memory(k)) host += swapper->shard_bytes(k);
    }
    swap_text = ", the frozen weights of its " + std::to_string(swapper->n_blocks()) + " blocks sharded over " +
                std::to_string(swapper->shard_ranks()) + " ranks" +
                (config_.distributed.shard_within_node ? " of each node" : "") + " (" + format_bytes(mine) + " of " + format_bytes(whole) +
                " on this rank" + (host > 0 ? ", " + format_bytes(host) + " of it in host memory" : "") +
                ", all-gathered as each block runs)";
  } else if (swapper) {
    int64_t host = 0;
    for (int k = 0; k < swapper->n_blocks(); ++k) host += swapper->block_bytes(k);
    swap_text = ", " + std::to_string(swapper->n_blocks()) + " blocks swapped (" + format_bytes(host) +
                " of frozen weights in host memory, streamed to " + swapper->device().str() + " as each block runs)";
  }
  return model_->summary() + " with " + std::to_string(model_->n_parameters()) + " parameters (" +
         std::to_string(model_->n_parameters(true)) + " trainable, " + network_type_name(config_.network.type) + ")" +
         (n_float8 > 0 ? ", " + std::to_string(n_float8) + " frozen Linears in float8 e4m3" : "") + swap_text;
}

std::map<std::string, std::string> DiffusionTask::checkpoint_metadata() const {
  return {{"wick_network_type", network_type_name(config_.network.type)}, {"wick_arch", config_.model.arch}};
}

void DiffusionTask::after_checkpoint(int64_t step) {
  if (config_.network.type != NetworkType::Full) {
    fs::path lora = run_dir_ / "lora" / (config_.name + ".safetensors");
    save_lora(*model_, config_, lora.string(), step, base_hash_);
    lora_file_ = lora;
  } else {  // the trained model in save.dtype (the checkpoint keeps the exact weights)
    model_file_ = save_model_weights(*model_, config_, run_dir_ / "model", step);
  }
}

// A grid says when it starts (and, on a terminal, its denoising steps), and gives way to a stop signal between two
// steps: the stop's checkpoint does not wait for the images, and that step's grid is not written.
void DiffusionTask::after_step(int64_t step, bool last, RunLog* log) {
  if (!sampler_ || config_.sample.every <= 0 || (step % config_.sample.every != 0 && !last)) return;
  if (rank_ != 0) {  // the grid's gathers need this rank; rank 0 writes it
    write_sample_grid(*model_, *sampler_, config_, data_, run_dir_, step, nullptr, /*write=*/false);
    return;
  }
  // With the weights sharded the grid is finished whatever the stop signals say: a rank leaving a grid half
  // way would leave the others waiting in a gather.
  const bool stoppable = !after_step_on_every_rank();
  const bool terminal = ::isatty(::fileno(stderr));
  std::fprintf(stderr, "%swick train: sampling the grid of step %lld (%lld denoising steps per image)%s",
               terminal ? "\n" : "", static_cast<long long>(step), static_cast<long long>(config_.sample.steps),
               terminal ? "" : "\n");
  try {
    diffusion::SamplingWatchScope watch([&](int64_t k, int64_t steps) {
      if (stoppable && PreemptionWatch::requested()) throw diffusion::SamplingStopped();
      if (terminal) std::fprintf(stderr, "\rwick train: sampling the grid of step %lld: step %lld/%lld ",
                                 static_cast<long long>(step), static_cast<long long>(k),
                                 static_cast<long long>(steps));
    });
    sample_grids_.push_back(write_sample_grid(*model_, *sampler_, config_, data_, run_dir_, step, log));
  } catch (const diffusion::SamplingStopped&) {
    std::fprintf(stderr, "%swick train: the grid of step %lld was left unfinished for the stop request (not written)\n",
                 terminal ? "\n" : "", static_cast<long long>(step));
    return;
  }
  std::fprintf(stderr, "%swick train: samples %s\n", terminal ? "\n" : "", sample_grids_.back().c_str());
}

}  // namespace wick
