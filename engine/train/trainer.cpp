#include "engine/train/trainer.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>

#include "comm/launch_env.h"
#include "engine/autograd/backward.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/rng_state.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "engine/distributed/gradient_buckets.h"
#include "engine/distributed/zero.h"
#include "engine/checkpoint/sha256.h"
#include "engine/data/prefetcher.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/train/grad_sync.h"
#include "engine/train/model_factory.h"
#include "engine/train/objective.h"
#include "engine/train/train_checkpoint.h"
#include "engine/train/train_log.h"
#include "engine/train/train_samples.h"
#include "engine/train/train_setup.h"
#include "runtime/philox.h"

namespace fs = std::filesystem;

namespace wick {

fs::path run_directory(const TrainConfig& config) { return fs::path(config.output_dir) / config.name; }

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string format_g(double value) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

// Writes `text` to `path` through a temporary file and a rename.
void write_text_file(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    WICK_CHECK_KIND(Data, out.good(), "cannot write ", tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  WICK_CHECK_KIND(Data, !ec, "cannot rename ", tmp.string(), " to ", path.string(), ": ", ec.message());
}

int64_t extra_int(const TrainingState& state, const std::string& key, int64_t fallback) {
  auto it = state.extra.find(key);
  return it == state.extra.end() ? fallback : std::stoll(it->second);
}

class Trainer {
 public:
  Trainer(const TrainConfig& config, const TrainOptions& options) : config_(config), options_(options) {}
  TrainResult run();

 private:
  void setup();
  void restore(const CheckpointFiles& files, DistributedSampler& sampler);
  // Runs one optimizer step; false when it was skipped for a non-finite loss.
  bool train_step(int64_t step);
  void save(int64_t step);
  bool rank0() const { return group_->rank() == 0; }
  // Ends the progress bar's line before a message when the bar is drawn in place.
  const char* line_break() const { return options_.progress && ::isatty(::fileno(stderr)) ? "\n" : ""; }
  int64_t global_batch() const { return config_.train.batch_size * group_->size(); }

  TrainConfig config_;
  TrainOptions options_;
  fs::path run_dir_;
  Device device_;
  DType compute_ = DType::F32;
  std::shared_ptr<comm::ProcessGroup> group_;
  TrainingData data_;
  std::shared_ptr<DiT> model_;
  NamedParameters trainable_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<GradientBuckets> buckets_;  // a communicator on the parameters' device, no fp16 scaler
  std::optional<LrSchedule> schedule_;
  std::unique_ptr<Objective> objective_;
  std::unique_ptr<Prefetcher> loader_;
  std::optional<LossScaler> scaler_;
  std::unique_ptr<RunLog> log_;
  autograd::GradientStore grads_;
  std::string config_hash_, base_hash_;
  int64_t start_step_ = 0, skipped_ = 0, nonfinite_in_a_row_ = 0;
  TrainResult result_;
};

void Trainer::setup() {
  check_supported(config_);
  device_ = select_device(config_);
  group_ = comm::make_process_group(comm_backend_name(config_.distributed.backend), device_,
                                    static_cast<double>(config_.distributed.timeout_s));
  if (group_->device().is_cuda()) device_ = group_->device();  // NCCL: the node-local rank's GPU
  result_.rank = group_->rank();
  result_.world_size = group_->size();
  run_dir_ = run_directory(config_);
  result_.run_dir = run_dir_;
  if (rank0()) check_output_directory(run_dir_, options_.resume);
  data_ = open_training_data(config_, /*validate=*/true);
  check_sampling(config_, data_);
  compute_ = compute_dtype(config_);
  model_ = build_model(config_, *data_.dataset, device_);
  if (rank0() && !config_.model.name_or_path.empty())
    base_hash_ = sha256_file(resolve_weights_file(config_.model.name_or_path));
  trainable_ = model_->trainable_parameters();
  config_hash_ = config_hash(config_);

  // Rank 0's files are the verified ones: loading reads the bytes that were hashed (no second read).
  std::shared_ptr<const CheckpointFiles> resume = choose_resume_checkpoint(*group_, run_dir_, options_.resume);
  if (resume) load_trainable_weights(*model_, *resume);  // before the optimizer reads the parameters
  const TrainSection& t = config_.train;
  OptimizerConfig oc{.beta1 = static_cast<float>(t.betas.at(0)), .beta2 = static_cast<float>(t.betas.at(1)),
                     .eps = static_cast<float>(t.eps), .weight_decay = static_cast<float>(t.weight_decay),
                     .momentum = static_cast<float>(t.betas.at(0)),
                     .max_grad_norm = static_cast<float>(t.max_grad_norm)};
  optimizer_ = make_optimizer(t.optimizer, trainable_, oc);
  schedule_ = make_lr_schedule({.name = t.lr_scheduler, .base_lr = t.lr, .warmup_steps = t.warmup,
                                .total_steps = t.steps});
  objective_ = std::make_unique<Objective>(config_);
  if (t.mixed_precision == MixedPrecision::FP16) scaler_.emplace();
  // Data parallelism (docs/distributed.md): gradients averaged in buckets overlapped with backward,
  // optimizer state sharded (ZeRO-1). Both need a communicator (several ranks, or NCCL forced on
  // one GPU: distributed.backend nccl) working on the parameters' device (MPI with CPU parameters,
  // NCCL with CUDA ones); otherwise, and with the fp16 loss scaler (which unscales the gradient
  // store), the gradients are averaged in one staged all-reduce after backward.
  const bool communicator = group_->backend() != "single" && group_->device() == device_;
  if (communicator && config_.distributed.shard_optimizer) shard_optimizer(*optimizer_, *group_);
  if (communicator && !scaler_)
    buckets_ = std::make_unique<GradientBuckets>(*optimizer_, *group_, config_.distributed.bucket_mb << 20);
  DistributedSampler sampler(data_.ids, data_.bucket_of,
                             {.seed = static_cast<uint64_t>(t.seed), .rank = group_->rank(), .world = group_->size(),
                              .batch_size = t.batch_size});
  if (resume) restore(*resume, sampler);
  loader_ = std::make_unique<Prefetcher>(data_.dataset, std::move(sampler), PrefetchOptions{.depth = 2, .device = device_});
}

void Trainer::restore(const CheckpointFiles& files, DistributedSampler& sampler) {
  const fs::path& dir = files.dir();
  if (optimizer_->sharded())  // this rank's range of the state, whatever world size wrote it
    load_optimizer_shard_into(*optimizer_, reshard_optimizer_state(files, group_->size()).at(group_->rank()));
  else
    optimizer_->load_state(load_optimizer_state(files));
  TrainingState state =
      training_state_from_json(files.text("training_state.json"), (dir / "training_state.json").string());
  WICK_CHECK_KIND(Config, state.seed == static_cast<uint64_t>(config_.train.seed), dir.string(),
                  ": the checkpoint was trained with seed ", state.seed, " but train.seed is ", config_.train.seed);
  const int64_t saved_batch = extra_int(state, "global_batch", global_batch());
  WICK_CHECK_KIND(Config, saved_batch == global_batch(), dir.string(), ": the checkpoint was trained with ",
                  saved_batch, " samples per micro-step over all ranks, this run has ", global_batch(),
                  " (batch_size x ranks must stay the same to resume)");
  WICK_CHECK_KIND(Data, state.step == optimizer_->steps_taken(), dir.string(), ": training_state step ", state.step,
                  " but the optimizer state has ", optimizer_->steps_taken(), " steps");
  sampler.load_state({.epoch = state.epoch, .position = state.sample_cursor / global_batch()});
  start_step_ = state.step;
  skipped_ = extra_int(state, "skipped_steps", 0);
  nonfinite_in_a_row_ = extra_int(state, "nonfinite_in_a_row", 0);
  if (scaler_ && state.extra.count("loss_scale"))
    scaler_->load_state({{"scale", Tensor::scalar(std::stod(state.extra.at("loss_scale")), DType::F64)},
                         {"growth_tracker", Tensor::scalar(static_cast<double>(extra_int(state, "loss_scale_tracker", 0)), DType::I64)},
                         {"n_skipped", Tensor::scalar(static_cast<double>(extra_int(state, "loss_scale_skipped", 0)), DType::I64)}});
  result_.resumed_from = dir;
  if (rank0()) {
    CheckpointManifest manifest = files.report().manifest ? *files.report().manifest : read_manifest(dir);
    if (manifest.config_hash != config_hash_)
      std::fprintf(stderr, "wick: warning: resume: the config differs from the one that wrote %s (hash %s, now %s)\n",
                   dir.string().c_str(), manifest.config_hash.c_str(), config_hash_.c_str());
    std::fprintf(stderr, "wick train: resuming from %s (step %lld)\n", dir.string().c_str(),
                 static_cast<long long>(state.step));
  }
}

bool Trainer::train_step(int64_t step) {
  const TrainSection& t = config_.train;
  const double lr = schedule_->lr_at(step - 1);
  const auto seed = static_cast<uint64_t>(t.seed);
  // Dropout (network.dropout) draws row b of a batch-leading tensor from sample b's stream, keyed by
  // (seed, sample id, epoch), so its masks do not depend on the rank or the world size; other draws
  // come from a stream of (seed, step, rank) (docs/training.md "Randomness").
  autograd::current_rng() = {derive_stream(seed, static_cast<uint64_t>(step), static_cast<uint64_t>(group_->rank()),
                                           RngPurpose::StepDropout), 0};
  const double caption_dropout = config_.datasets[0].caption_dropout;
  const LatentDatasetAttributes& attributes = data_.dataset->attributes();
  grads_.clear();
  double local_sum = 0.0, local_bad = 0.0;
  for (int64_t micro = 0; micro < t.gradient_accumulation; ++micro) {
    if (buckets_) buckets_->arm(micro == t.gradient_accumulation - 1);  // only the last micro-step sends
    Batch batch = loader_->next();
    check_batch_finite(batch.latents, batch.ids, data_.dataset->path());
    const int64_t epoch = batch_epoch(batch);
    autograd::set_sample_streams(
        autograd::per_sample_streams(seed, batch.ids, static_cast<uint64_t>(epoch), RngPurpose::Dropout));
    Tensor x0 = Objective::scale_latents(batch.latents, attributes);
    diffusion::Conditioning cond = drop_captions(batch, caption_dropout, seed, epoch);
    ObjectiveBatch ob = objective_->make(x0, batch.ids, epoch);
    Tensor x_in = ob.x_t.dtype() == compute_ ? ob.x_t : ob.x_t.to(compute_);
    Tensor pred = model_->forward(x_in, ob.model_time, cond.context, cond.context_mask, cond.pooled);
    Tensor loss = objective_->loss(pred, ob);
    const double value = loss.item();
    if (!std::isfinite(value)) {
      local_bad += 1.0;  // keep drawing this step's batches: every rank's loader stays in step
      continue;
    }
    local_sum += value;
    Tensor scaled = t.gradient_accumulation > 1 ? autograd::mul(loss, 1.0 / static_cast<double>(t.gradient_accumulation))
                                                : loss;
    autograd::backward(scaled, grads_, autograd::GradientMode::Accumulate,
                       scaler_ ? scaler_->loss_gradient(scaled) : Tensor());
  }
  autograd::set_sample_streams({});
  // Every rank finishes the buckets' collectives before any other one (docs/distributed.md).
  BucketReport reduced;
  if (buckets_) reduced = buckets_->finish(grads_);
  std::vector<double> totals = all_reduce_sum(*group_, {local_sum, local_bad});
  const double n_micro = static_cast<double>(t.gradient_accumulation * group_->size());
  StepLog entry{.step = step, .loss = totals[1] > 0 ? kNaN : totals[0] / n_micro, .lr = lr,
                .samples = global_batch() * t.gradient_accumulation};
  if (!std::isfinite(entry.loss)) {
    ++skipped_;
    ++nonfinite_in_a_row_;
    if (rank0())
      std::fprintf(stderr, "%swick: warning: step %lld: non-finite loss, step skipped (%lld in a row; the run stops at %lld)\n",
                   line_break(), static_cast<long long>(step), static_cast<long long>(nonfinite_in_a_row_),
                   static_cast<long long>(t.max_nonfinite_steps));
  } else {
    nonfinite_in_a_row_ = 0;
    if (!buckets_) average_gradients(*group_, trainable_, grads_);
    bool finite = true;
    if (scaler_) {
      finite = scaler_->unscale_and_check(grads_);
      scaler_->update(finite);
    }
    if (finite)
      entry.grad_norm = buckets_ ? optimizer_->step_reduced(static_cast<float>(lr), reduced.n_missing).grad_norm
                                 : optimizer_->step(grads_, static_cast<float>(lr)).grad_norm;
  }
  grads_.clear();
  entry.skipped_steps = skipped_;
  entry.memory_bytes = peak_memory_bytes(device_);
  if (scaler_) entry.loss_scale = scaler_->scale();
  result_.losses.push_back(entry.loss);
  result_.last_step = step;
  if (log_) log_->step(entry);
  WICK_CHECK_KIND(Training, nonfinite_in_a_row_ < t.max_nonfinite_steps, "step ", step, ": ", nonfinite_in_a_row_,
                  " non-finite losses in a row (train.max_nonfinite_steps = ", t.max_nonfinite_steps,
                  "); the run stops. The last checkpoint under ", checkpoints_dir(run_dir_).string(),
                  " is unchanged; lower train.lr or check the data");
  return std::isfinite(entry.loss);
}

void Trainer::save(int64_t step) {
  const SamplerState position = loader_->state();
  TrainingState state{.step = step, .epoch = position.epoch, .sample_cursor = position.position * global_batch(),
                      .seed = static_cast<uint64_t>(config_.train.seed), .rng = autograd::current_rng()};
  state.extra = {{"global_batch", std::to_string(global_batch())},
                 {"skipped_steps", std::to_string(skipped_)},
                 {"nonfinite_in_a_row", std::to_string(nonfinite_in_a_row_)}};
  if (scaler_) {
    state.extra["loss_scale"] = format_g(scaler_->scale());
    state.extra["loss_scale_tracker"] = std::to_string(scaler_->growth_tracker());
    state.extra["loss_scale_skipped"] = std::to_string(scaler_->n_skipped());
  }
  CheckpointSave request{.run_dir = run_dir_, .step = step, .trainable = &trainable_, .optimizer = optimizer_.get(),
                         .state = state,
                         .model_metadata = {{"wick_config_hash", config_hash_},
                                            {"wick_network_type", network_type_name(config_.network.type)}},
                         .config_hash = config_hash_,
                         .shard_optimizer = config_.distributed.shard_optimizer,
                         .keep_last = static_cast<int>(config_.save.keep_last)};
  result_.last_checkpoint = save_training_checkpoint(*group_, request);
  if (config_.network.type != NetworkType::Full && rank0()) {
    fs::path lora = run_dir_ / "lora" / (config_.name + ".safetensors");
    save_lora(*model_, config_, lora.string(), step, base_hash_);
    result_.lora_file = lora;
  } else if (rank0()) {  // the trained model in save.dtype (the checkpoint keeps the exact weights)
    fs::path exported = run_dir_ / "model" / (config_.name + ".safetensors");
    save_model_weights(*model_, config_, exported.string(), step);
    result_.model_file = exported;
  }
}

TrainResult Trainer::run() {
  setup();
  const TrainSection& t = config_.train;
  const int64_t last = options_.stop_after_step > 0 ? std::min(options_.stop_after_step, t.steps) : t.steps;
  result_.first_step = start_step_ + 1;
  result_.skipped_steps = skipped_;
  if (start_step_ >= last) {
    if (rank0())
      std::fprintf(stderr, "wick train: %s: the run is at step %lld of %lld already; nothing to do\n",
                   config_.name.c_str(), static_cast<long long>(start_step_), static_cast<long long>(t.steps));
    return result_;
  }
  if (rank0()) {
    write_text_file(run_dir_ / "config.yaml", to_yaml(config_));
    log_ = std::make_unique<RunLog>(run_dir_, RunLogOptions{.total_steps = t.steps, .first_step = start_step_ + 1,
                                                            .log_every = t.log_every, .progress = options_.progress});
    std::fprintf(stderr,
                 "wick train: %s: DiT with %lld parameters (%lld trainable, %s), %zu samples of %s, %s, %d rank%s, "
                 "steps %lld..%lld, %lld samples per step\n",
                 config_.name.c_str(), static_cast<long long>(model_->n_parameters()),
                 static_cast<long long>(model_->n_parameters(true)), network_type_name(config_.network.type),
                 data_.ids.size(), data_.dataset->path().c_str(), device_.str().c_str(), group_->size(),
                 group_->size() == 1 ? "" : "s", static_cast<long long>(start_step_ + 1), static_cast<long long>(last),
                 static_cast<long long>(global_batch() * t.gradient_accumulation));
    if (group_->size() > 1 || buckets_) {
      std::string gradients = "gradients averaged after backward";
      if (buckets_)
        gradients = std::string(buckets_->reduce_scatters() ? "gradients reduce-scattered" : "gradients all-reduced") +
                    " in " + std::to_string(buckets_->n_buckets()) + " bucket(s) overlapped with backward";
      std::fprintf(stderr, "wick train: data parallel over %d rank%s (%s on %s): %s, optimizer state %s\n",
                   group_->size(), group_->size() == 1 ? "" : "s", group_->backend().c_str(),
                   group_->device().str().c_str(), gradients.c_str(),
                   optimizer_->sharded() ? "sharded (ZeRO-1)" : "replicated");
    }
  }
  if (rank0()) {
    const double n_params = static_cast<double>(model_->n_parameters(true));
    std::fprintf(stderr, "wick train: %s optimizer state on rank 0: %.1f MB, %.3f bytes per trainable parameter\n",
                 optimizer_->name(), static_cast<double>(optimizer_->state_bytes()) / 1e6,
                 static_cast<double>(optimizer_->state_bytes()) / n_params);
  }
  model_->train();
  for (int64_t step = start_step_ + 1; step <= last; ++step) {
    // A skipped step changed nothing: no checkpoint for it (the previous one holds the same weights).
    const bool stepped = train_step(step);
    if (stepped && ((config_.save.every > 0 && step % config_.save.every == 0) || step == last)) save(step);
    if (config_.sample.every > 0 && (step % config_.sample.every == 0 || step == t.steps) && rank0()) {
      result_.sample_grids.push_back(write_sample_grid(*model_, config_, data_, run_dir_, step, log_.get()));
      std::fprintf(stderr, "%swick train: samples %s\n", line_break(), result_.sample_grids.back().c_str());
    }
  }
  if (log_) log_->finish();
  if (rank0()) {
    std::fprintf(stderr, "wick train: %s: outputs in %s", config_.name.c_str(), run_dir_.string().c_str());
    if (result_.last_checkpoint) std::fprintf(stderr, " (checkpoint %s", result_.last_checkpoint->string().c_str());
    if (result_.lora_file) std::fprintf(stderr, ", LoRA %s", result_.lora_file->string().c_str());
    if (result_.model_file) std::fprintf(stderr, ", model %s", result_.model_file->string().c_str());
    std::fprintf(stderr, "%s\n", result_.last_checkpoint ? ")" : "");
  }
  result_.skipped_steps = skipped_;
  return result_;
}

}  // namespace

TrainResult train(const TrainConfig& config, const TrainOptions& options) {
  Trainer trainer(config, options);
  return trainer.run();
}

}  // namespace wick
