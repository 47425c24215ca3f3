#include "engine/train/step_loop.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "engine/autograd/backward.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/rng_state.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_preflight.h"
#include "engine/checkpoint/latest_pointer.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "engine/data/prefetcher.h"
#include "engine/distributed/gradient_buckets.h"
#include "engine/distributed/zero.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/train/grad_sync.h"
#include "engine/train/preemption.h"
#include "engine/train/train_checkpoint.h"
#include "engine/train/train_log.h"
#include "engine/train/train_setup.h"
#include "runtime/atomic_file.h"
#include "runtime/philox.h"

namespace fs = std::filesystem;

namespace wick {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class StepLoop {
 public:
  StepLoop(TrainingTask& task, const StepLoopSetup& setup, const StepLoopOptions& options)
      : task_(task), setup_(setup), options_(options), t_(setup.train), group_(setup.group) {}
  LoopResult run();

 private:
  void setup();
  void restore(const CheckpointFiles& files, DistributedSampler& sampler);
  // Runs one optimizer step; false when it was skipped for a non-finite loss.
  bool train_step(int64_t step);
  void save(int64_t step);
  // After a stop request (SIGTERM / SIGUSR1 on some rank) ended the loop at `step`, its checkpoint
  // written when `saved`: records it in the result, and rank 0 says so.
  void preempted(int64_t step, bool saved);
  // Rank 0, before step 1: the checkpoints folder is writable, `latest` replaceable, space free.
  void preflight();
  void announce(int64_t last);
  bool rank0() const { return group_->rank() == 0; }
  // Ends the progress bar's line before a message when the bar is drawn in place.
  const char* line_break() const { return options_.progress && ::isatty(::fileno(stderr)) ? "\n" : ""; }
  // Samples per micro-step over all ranks: train.global_batch_size, or batch_size x ranks.
  int64_t global_batch() const {
    return t_.global_batch_size > 0 ? t_.global_batch_size : t_.batch_size * group_->size();
  }
  // Of them, regularization samples (0 without regularization data).
  int64_t reg_global_batch() const {
    return t_.global_batch_size > 0 ? setup_.reg_per_batch : setup_.reg_per_batch * group_->size();
  }

  TrainingTask& task_;
  const StepLoopSetup& setup_;
  StepLoopOptions options_;
  const TrainSection& t_;
  std::shared_ptr<comm::ProcessGroup> group_;
  NamedParameters trainable_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<GradientBuckets> buckets_;  // a communicator on the parameters' device, no fp16 scaler
  std::optional<LrSchedule> schedule_;
  std::unique_ptr<Prefetcher> loader_;
  std::optional<LossScaler> scaler_;
  std::unique_ptr<RunLog> log_;
  autograd::GradientStore grads_;
  int64_t start_step_ = 0, skipped_ = 0, nonfinite_in_a_row_ = 0;
  bool uniform_ = true;  // every rank takes the same share in one piece: batch_size-only arithmetic
  std::optional<PreemptionWatch> watch_;
  int64_t stopping_ranks_ = 0;  // ranks that asked to stop (SIGTERM / SIGUSR1), summed with the step's loss
  LoopResult result_;
};

void StepLoop::setup() {
  result_.rank = group_->rank();
  result_.world_size = group_->size();
  result_.run_dir = setup_.run_dir;
  trainable_ = task_.model().trainable_parameters();
  WICK_CHECK_KIND(Config, !trainable_.empty(), setup_.name,
                  ": no parameter is trainable (did the network.target patterns match any module?)");

  // Rank 0's files are the verified ones: loading reads the bytes that were hashed (no second read).
  std::shared_ptr<const CheckpointFiles> resume = choose_resume_checkpoint(*group_, setup_.run_dir, options_.resume);
  if (resume) load_trainable_weights(task_.model(), *resume);  // before the optimizer reads the parameters
  OptimizerConfig oc{.beta1 = static_cast<float>(t_.betas.at(0)), .beta2 = static_cast<float>(t_.betas.at(1)),
                     .eps = static_cast<float>(t_.eps), .weight_decay = static_cast<float>(t_.weight_decay),
                     .momentum = static_cast<float>(t_.betas.at(0)),
                     .max_grad_norm = static_cast<float>(t_.max_grad_norm)};
  optimizer_ = make_optimizer(t_.optimizer, trainable_, oc);
  schedule_ = make_lr_schedule({.name = t_.lr_scheduler, .base_lr = t_.lr, .warmup_steps = t_.warmup,
                                .total_steps = t_.steps});
  if (t_.mixed_precision == MixedPrecision::FP16) scaler_.emplace();
  // Data parallelism (docs/distributed.md): gradients averaged in buckets overlapped with backward,
  // optimizer state sharded (ZeRO-1). Both need a communicator (several ranks, or NCCL forced on
  // one GPU: distributed.backend nccl) working on the parameters' device (MPI with CPU parameters,
  // NCCL with CUDA ones); otherwise, and with the fp16 loss scaler (which unscales the gradient
  // store), the gradients are averaged in one staged all-reduce after backward.
  const bool communicator = group_->backend() != "single" && group_->device() == setup_.device;
  if (communicator && setup_.distributed.shard_optimizer) shard_optimizer(*optimizer_, *group_);
  if (communicator && !scaler_)
    buckets_ = std::make_unique<GradientBuckets>(*optimizer_, *group_, setup_.distributed.bucket_mb << 20);
  WICK_CHECK_KIND(Config, global_batch() >= group_->size(), "train.global_batch_size ", global_batch(),
                  " is smaller than the number of ranks (", group_->size(), "): every rank needs at least one sample");
  WICK_CHECK(setup_.share_splits >= 1, "step loop: share_splits ", setup_.share_splits);
  const SamplerOptions sampling{.seed = static_cast<uint64_t>(t_.seed),
                                .rank = group_->rank(),
                                .world = group_->size(),
                                .batch_size = t_.batch_size,
                                .global_batch_size = t_.global_batch_size,
                                .reg_per_batch = setup_.reg_per_batch};
  DistributedSampler sampler = setup_.reg_per_batch > 0
                                   ? DistributedSampler(setup_.ids, setup_.bucket_of, setup_.reg_ids,
                                                        setup_.reg_bucket_of, sampling)
                                   : DistributedSampler(setup_.ids, setup_.bucket_of, sampling);
  uniform_ = global_batch() % group_->size() == 0 && setup_.share_splits == 1;
  if (resume) restore(*resume, sampler);
  loader_ = std::make_unique<Prefetcher>(setup_.dataset, std::move(sampler),
                                         PrefetchOptions{.depth = 2, .device = setup_.device});
}

void StepLoop::restore(const CheckpointFiles& files, DistributedSampler& sampler) {
  const fs::path& dir = files.dir();
  if (optimizer_->sharded())  // this rank's range of the state, whatever world size wrote it
    load_optimizer_shard_into(*optimizer_, reshard_optimizer_state(files, group_->size()).at(group_->rank()));
  else
    optimizer_->load_state(load_optimizer_state(files));
  TrainingState state =
      training_state_from_json(files.text("training_state.json"), (dir / "training_state.json").string());
  WICK_CHECK_KIND(Config, state.seed == static_cast<uint64_t>(t_.seed), dir.string(),
                  ": the checkpoint was trained with seed ", state.seed, " but train.seed is ", t_.seed);
  const int64_t saved_batch = state.global_batch > 0 ? state.global_batch : global_batch();
  if (saved_batch != global_batch() && t_.global_batch_size > 0)
    WICK_FAIL(Config, dir.string(), ": the checkpoint was trained with ", saved_batch,
              " samples per micro-step over all ranks, but train.global_batch_size is ", t_.global_batch_size,
              "; set train.global_batch_size: ", saved_batch, " to continue it (on any number of ranks)");
  WICK_CHECK_KIND(Config, saved_batch == global_batch(), dir.string(), ": the checkpoint was trained with ",
                  saved_batch, " samples per micro-step over all ranks, this run has ", global_batch(),
                  " (batch_size x ranks must stay the same to resume; to continue on ", group_->size(), " rank",
                  group_->size() == 1 ? "" : "s", ", set train.global_batch_size: ", saved_batch,
                  " instead of train.batch_size, and each rank takes ", saved_batch / group_->size(),
                  saved_batch % group_->size() == 0 ? "" : (" or " + std::to_string(saved_batch / group_->size() + 1)),
                  " samples)");
  // Regularization samples per global batch: round(reg_ratio x global_batch_size) over all ranks, ranks x
  // round(reg_ratio x batch_size) per rank; the two differ where reg_ratio x batch_size is not whole.
  WICK_CHECK_KIND(Config, state.reg_batch == 0 || state.reg_batch == reg_global_batch(), dir.string(),
                  ": the checkpoint was trained with ", state.reg_batch,
                  " regularization samples per micro-step over all ranks, this run has ", reg_global_batch(),
                  " (train.reg_ratio x ", t_.global_batch_size > 0 ? "train.global_batch_size" : "train.batch_size",
                  ", rounded", t_.global_batch_size > 0 ? "" : ", per rank",
                  "); set train.reg_ratio so that the count stays ", state.reg_batch, " to continue it");
  WICK_CHECK_KIND(Data, state.step == optimizer_->steps_taken(), dir.string(), ": training_state step ", state.step,
                  " but the optimizer state has ", optimizer_->steps_taken(), " steps");
  sampler.load_state({.epoch = state.epoch, .position = state.sample_cursor / global_batch()});
  start_step_ = state.step;
  skipped_ = state.skipped_steps;
  nonfinite_in_a_row_ = state.nonfinite_in_a_row;
  if (scaler_ && state.loss_scale)
    scaler_->load_state({{"scale", Tensor::scalar(state.loss_scale->scale, DType::F64)},
                         {"growth_tracker", Tensor::scalar(static_cast<double>(state.loss_scale->growth_tracker), DType::I64)},
                         {"n_skipped", Tensor::scalar(static_cast<double>(state.loss_scale->n_skipped), DType::I64)}});
  result_.resumed_from = dir;
  if (rank0()) {
    CheckpointManifest manifest = files.report().manifest ? *files.report().manifest : read_manifest(dir);
    if (manifest.config_hash != setup_.config_hash)
      std::fprintf(stderr, "wick: warning: resume: the config differs from the one that wrote %s (hash %s, now %s)\n",
                   dir.string().c_str(), manifest.config_hash.c_str(), setup_.config_hash.c_str());
    std::fprintf(stderr, "wick train: resuming from %s (step %lld)\n", dir.string().c_str(),
                 static_cast<long long>(state.step));
  }
}

bool StepLoop::train_step(int64_t step) {
  const double lr = schedule_->lr_at(step - 1);
  const auto seed = static_cast<uint64_t>(t_.seed);
  // Dropout (network.dropout) draws row b of a batch-leading tensor from sample b's stream, keyed by
  // (seed, sample id, epoch), so its masks do not depend on the rank or the world size; other draws
  // come from a stream of (seed, step, rank) (docs/training.md "Randomness").
  autograd::current_rng() = {derive_stream(seed, static_cast<uint64_t>(step), static_cast<uint64_t>(group_->rank()),
                                           RngPurpose::StepDropout), 0};
  grads_.clear();
  // The step's gradient is the mean over its global batches' samples whatever the split: a piece of
  // n samples (its loss a mean over them) weighs n x ranks / (global batch x accumulation), and the
  // reduction divides by the ranks. With equal shares in one piece that is 1 / accumulation.
  const int64_t accumulation = t_.gradient_accumulation, world = group_->size();
  double local_sum = 0.0, local_bad = 0.0;
  const bool lockstep = setup_.distributed.shard_weights;
  for (int64_t micro = 0; micro < accumulation; ++micro) {
    Batch batch = loader_->next();
    check_batch_finite(batch.latents, batch.ids, setup_.dataset->path());
    const int64_t n = static_cast<int64_t>(batch.ids.size());
    // Sharded weights: every rank runs the same passes (each block's gather is a collective), so the
    // pieces are as many as the smallest share allows on every rank.
    int64_t pieces = std::min(setup_.share_splits, n);
    if (lockstep && group_->size() > 1 && setup_.share_splits > 1) {
      Tensor fewest = Tensor::from_vector<double>({-static_cast<double>(pieces)}, {1}, group_->device());
      group_->all_reduce(fewest, comm::ReduceOp::Max);
      pieces = -static_cast<int64_t>(fewest.to_vector<double>().at(0));
    }
    for (int64_t piece = 0, begin = 0; piece < pieces; ++piece) {
      const int64_t count = n / pieces + (piece < n % pieces ? 1 : 0);
      // Only the last piece of the last micro-step sends.
      if (buckets_) buckets_->arm(micro == accumulation - 1 && piece == pieces - 1);
      const Batch part = pieces == 1 ? std::move(batch) : slice_batch(batch, begin, count);
      begin += count;
      autograd::set_sample_streams(
          autograd::per_sample_streams(seed, part.ids, static_cast<uint64_t>(batch_epoch(part)), RngPurpose::Dropout));
      Tensor loss = task_.micro_batch_loss(part);
      const double value = loss.item();
      if (!std::isfinite(value)) {
        local_bad += 1.0;  // keep drawing this step's batches: every rank's loader stays in step
        // Sharded weights: backward still runs (its gathers are collectives); the step is skipped on every
        // rank below, and its gradients are cleared.
        if (!lockstep) continue;
      } else {
        local_sum += uniform_ ? value : value * static_cast<double>(count);
      }
      const double weight =
          uniform_ ? 1.0 / static_cast<double>(accumulation)
                   : static_cast<double>(count * world) / static_cast<double>(global_batch() * accumulation);
      Tensor scaled = weight != 1.0 ? autograd::mul(loss, weight) : loss;
      autograd::backward(scaled, grads_, autograd::GradientMode::Accumulate,
                         scaler_ ? scaler_->loss_gradient(scaled) : Tensor());
    }
  }
  autograd::set_sample_streams({});
  // Every rank finishes the buckets' collectives before any other one (docs/distributed.md).
  BucketReport reduced;
  if (buckets_) reduced = buckets_->finish(grads_);
  // A stop request rides on the step's one small collective, so every rank stops after this step.
  std::vector<double> totals = all_reduce_sum(*group_, {local_sum, local_bad, PreemptionWatch::requested() ? 1.0 : 0.0});
  stopping_ranks_ = static_cast<int64_t>(totals[2]);
  // The mean loss over the step's samples (equal shares: the mean of the micro-batches' means).
  const double mean = uniform_ ? totals[0] / static_cast<double>(accumulation * world)
                               : totals[0] / static_cast<double>(accumulation * global_batch());
  StepLog entry{.step = step, .loss = totals[1] > 0 ? kNaN : mean, .lr = lr, .samples = global_batch() * accumulation};
  if (!std::isfinite(entry.loss)) {
    ++skipped_;
    ++nonfinite_in_a_row_;
    if (rank0())
      std::fprintf(stderr, "%swick: warning: step %lld: non-finite loss, step skipped (%lld in a row; the run stops at %lld)\n",
                   line_break(), static_cast<long long>(step), static_cast<long long>(nonfinite_in_a_row_),
                   static_cast<long long>(t_.max_nonfinite_steps));
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
  entry.memory_bytes = peak_memory_bytes(setup_.device);
  if (scaler_) entry.loss_scale = scaler_->scale();
  result_.losses.push_back(entry.loss);
  result_.last_step = step;
  if (log_) log_->step(entry);
  WICK_CHECK_KIND(Training, nonfinite_in_a_row_ < t_.max_nonfinite_steps, "step ", step, ": ", nonfinite_in_a_row_,
                  " non-finite losses in a row (train.max_nonfinite_steps = ", t_.max_nonfinite_steps,
                  "); the run stops. The last checkpoint under ", checkpoints_dir(setup_.run_dir).string(),
                  " is unchanged; lower train.lr or check the data");
  return std::isfinite(entry.loss);
}

void StepLoop::save(int64_t step) {
  const SamplerState position = loader_->state();
  TrainingState state{.step = step, .epoch = position.epoch, .sample_cursor = position.position * global_batch(),
                      .seed = static_cast<uint64_t>(t_.seed), .rng = autograd::current_rng(),
                      .global_batch = global_batch(), .reg_batch = reg_global_batch(), .skipped_steps = skipped_,
                      .nonfinite_in_a_row = nonfinite_in_a_row_};
  if (scaler_)
    state.loss_scale = TrainingState::LossScale{scaler_->scale(), scaler_->growth_tracker(), scaler_->n_skipped()};
  std::map<std::string, std::string> metadata = task_.checkpoint_metadata();
  metadata["wick_config_hash"] = setup_.config_hash;
  CheckpointSave request{.run_dir = setup_.run_dir, .step = step, .trainable = &trainable_,
                         .optimizer = optimizer_.get(), .state = state, .model_metadata = metadata,
                         .config_hash = setup_.config_hash,
                         .shard_optimizer = setup_.distributed.shard_optimizer,
                         .keep_last = static_cast<int>(setup_.save.keep_last)};
  try {
    result_.last_checkpoint = save_training_checkpoint(*group_, request);
  } catch (const WickError& error) {
    // The writer removed its staging directory; `latest` and the earlier checkpoints are untouched.
    std::string previous = "no earlier checkpoint exists (the run would start over from step 1)";
    try {
      if (std::optional<fs::path> named = read_latest(checkpoints_dir(setup_.run_dir)).checkpoint)
        previous = "`latest` names " + named->string() +
                   ", which is intact (--resume auto continues from the newest valid checkpoint)";
    } catch (const WickError&) {
    }
    throw WickError(error.kind(), std::string(line_break()) + "step " + std::to_string(step) +
                                      ": saving the checkpoint failed, its partial files are removed: " + error.what() +
                                      "; " + previous);
  }
  if (rank0()) task_.after_checkpoint(step);
}

void StepLoop::preempted(int64_t step, bool saved) {
  result_.preempted = true;
  if (!rank0()) return;
  const std::string who = group_->size() == 1 ? stop_signal_name(PreemptionWatch::signal_number())
                                              : "a stop signal on " + std::to_string(stopping_ranks_) + " of " +
                                                    std::to_string(group_->size()) + " ranks";
  std::string checkpoint;
  if (saved && result_.last_checkpoint) {
    checkpoint = "checkpoint " + result_.last_checkpoint->string();
  } else {
    checkpoint = "step " + std::to_string(step) + " was skipped (non-finite loss), so no checkpoint was written for it";
    try {
      if (std::optional<fs::path> named = read_latest(checkpoints_dir(setup_.run_dir)).checkpoint)
        checkpoint += "; `latest` names " + named->string();
    } catch (const WickError&) {
    }
  }
  std::fprintf(stderr,
               "%swick train: %s: stopped after step %lld of %lld on request (%s): %s; exit status %d, continue "
               "with --resume auto\n",
               line_break(), setup_.name.c_str(), static_cast<long long>(step), static_cast<long long>(t_.steps),
               who.c_str(), checkpoint.c_str(), kExitPreempted);
}

void StepLoop::preflight() {
  uint64_t estimate = 0;  // model.safetensors + the optimizer state over all ranks + f32 masters
  for (const auto& [name, p] : trainable_) {
    estimate += static_cast<uint64_t>(p.nbytes());
    if (dtype_size(p.dtype()) == 2) estimate += 4 * static_cast<uint64_t>(p.numel());
  }
  estimate += static_cast<uint64_t>(optimizer_->state_bytes()) *
              static_cast<uint64_t>(optimizer_->sharded() ? group_->size() : 1);
  PreflightReport report =
      check_checkpoint_target(setup_.run_dir, {.estimate_bytes = estimate, .verified = result_.resumed_from});
  for (const std::string& note : report.notes) std::fprintf(stderr, "wick: note: %s\n", note.c_str());
}

void StepLoop::announce(int64_t last) {
  std::string estimate;
  if (setup_.memory_estimate_bytes > 0) {
    const double bytes = static_cast<double>(setup_.memory_estimate_bytes);
    char text[64];
    std::snprintf(text, sizeof text, ", estimated peak %.1f %s per rank", bytes >= 1e9 ? bytes / 1e9 : bytes / 1e6,
                  bytes >= 1e9 ? "GB" : "MB");
    estimate = text;
  }
  std::string regularization;
  if (setup_.reg_per_batch > 0)
    regularization = " (+ " + std::to_string(setup_.reg_ids.size()) + " regularization samples, " +
                     std::to_string(setup_.reg_per_batch) + " of every " +
                     (t_.global_batch_size > 0 ? std::to_string(t_.global_batch_size) + " over all ranks)"
                                               : std::to_string(t_.batch_size) + " per rank)");
  std::fprintf(stderr,
               "wick train: %s: %s, %zu samples%s of %s, %s, %d rank%s, steps %lld..%lld, %lld samples per step%s\n",
               setup_.name.c_str(), task_.describe().c_str(), setup_.ids.size(), regularization.c_str(),
               setup_.dataset->path().c_str(),
               setup_.device.str().c_str(), group_->size(), group_->size() == 1 ? "" : "s",
               static_cast<long long>(start_step_ + 1), static_cast<long long>(last),
               static_cast<long long>(global_batch() * t_.gradient_accumulation), estimate.c_str());
  // Batches are bucket-pure and a bucket's last batch is filled by wrapping around it (DistributedSampler): a bucket
  // smaller than the global batch repeats samples in every batch it gives. Said once.
  {
    std::map<int64_t, int64_t> sizes;
    for (int64_t b : setup_.bucket_of) ++sizes[b];
    const int64_t training_batch = global_batch() - (setup_.reg_per_batch > 0 ? setup_.reg_per_batch *
                                                     (t_.global_batch_size > 0 ? 1 : group_->size()) : 0);
    std::string small;
    int64_t n_small = 0;
    for (const auto& [bucket, n] : sizes) {
      if (n >= training_batch) continue;
      if (++n_small <= 3) {
        const auto& info = setup_.dataset->buckets().at(static_cast<size_t>(bucket));
        small += (small.empty() ? "" : ", ") + info.name + " (" + std::to_string(n) + ")";
      }
    }
    if (n_small > 0)
      std::fprintf(stderr,
                   "wick: note: %lld of %zu buckets hold fewer samples than a global batch of %lld: %s%s; their "
                   "batches repeat samples (a bucket's batches are filled by wrapping around it)\n",
                   static_cast<long long>(n_small), sizes.size(), static_cast<long long>(training_batch),
                   small.c_str(), n_small > 3 ? ", ..." : "");
  }
  if (t_.global_batch_size > 0 || setup_.share_splits > 1) {
    const int64_t world = group_->size(), most = rank_share(global_batch(), 0, world),
                  fewest = rank_share(global_batch(), world - 1, world);
    std::string shares = std::to_string(most);
    if (fewest != most)
      shares = std::to_string(most) + " (" + std::to_string(global_batch() % world) + " rank" +
               (global_batch() % world == 1 ? "" : "s") + ") or " + std::to_string(fewest);
    std::string pieces;
    if (setup_.share_splits > 1)
      pieces = ", each share trained in " + std::to_string(setup_.share_splits) +
               " micro-batches with their gradients accumulated (chosen from the memory estimate)";
    std::fprintf(stderr, "wick train: global batch of %lld samples over %d rank%s: %s samples per rank%s\n",
                 static_cast<long long>(global_batch()), group_->size(), group_->size() == 1 ? "" : "s", shares.c_str(),
                 pieces.c_str());
  }
  if (group_->size() > 1 || buckets_) {
    std::string gradients = "gradients averaged after backward";
    if (buckets_)
      gradients = std::string(buckets_->reduce_scatters() ? "gradients reduce-scattered" : "gradients all-reduced") +
                  " in " + std::to_string(buckets_->n_buckets()) + " bucket(s) overlapped with backward";
    std::fprintf(stderr, "wick train: data parallel over %d rank%s (%s on %s): %s, optimizer state %s%s\n",
                 group_->size(), group_->size() == 1 ? "" : "s", group_->backend().c_str(),
                 group_->device().str().c_str(), gradients.c_str(),
                 optimizer_->sharded() ? "sharded (ZeRO-1)" : "replicated",
                 setup_.distributed.shard_weights ? ", the blocks' frozen weights sharded (ZeRO-3)" : "");
  }
  int64_t n_trainable = 0;
  for (const auto& [name, p] : trainable_) n_trainable += p.numel();
  std::fprintf(stderr, "wick train: %s optimizer state on rank 0: %.1f MB, %.3f bytes per trainable parameter\n",
               optimizer_->name(), static_cast<double>(optimizer_->state_bytes()) / 1e6,
               static_cast<double>(optimizer_->state_bytes()) / static_cast<double>(n_trainable));
}

LoopResult StepLoop::run() {
  // SIGTERM / SIGUSR1: stop after a step, with a checkpoint (train() may have installed the watch already).
  if (!PreemptionWatch::installed()) watch_.emplace(group_->rank(), group_->size());
  setup();
  const int64_t last = options_.stop_after_step > 0 ? std::min(options_.stop_after_step, t_.steps) : t_.steps;
  result_.first_step = start_step_ + 1;
  result_.skipped_steps = skipped_;
  if (start_step_ >= last) {
    if (rank0())
      std::fprintf(stderr, "wick train: %s: the run is at step %lld of %lld already; nothing to do\n",
                   setup_.name.c_str(), static_cast<long long>(start_step_), static_cast<long long>(t_.steps));
    return result_;
  }
  if (rank0()) {
    preflight();
    write_file_atomically(setup_.run_dir / "config.yaml", setup_.config_yaml);
    log_ = std::make_unique<RunLog>(setup_.run_dir, RunLogOptions{.total_steps = t_.steps, .first_step = start_step_ + 1,
                                                                  .log_every = t_.log_every,
                                                                  .progress = options_.progress,
                                                                  .memory_is_process_rss = !setup_.device.is_cuda()});
    announce(last);
  }
  task_.model().train();
  for (int64_t step = start_step_ + 1; step <= last; ++step) {
    // A skipped step changed nothing: no checkpoint for it (the previous one holds the same weights).
    const bool stepped = train_step(step);
    const bool stop = stopping_ranks_ > 0 && step < last;
    if (stepped && ((setup_.save.every > 0 && step % setup_.save.every == 0) || step == last || stop)) save(step);
    if (stop) {
      preempted(step, stepped);
      break;
    }
    if (rank0() || task_.after_step_on_every_rank()) task_.after_step(step, step == t_.steps, rank0() ? log_.get() : nullptr);
  }
  if (log_) log_->finish();
  result_.skipped_steps = skipped_;
  return result_;
}

}  // namespace

LoopResult run_step_loop(TrainingTask& task, const StepLoopSetup& setup, const StepLoopOptions& options) {
  StepLoop loop(task, setup, options);
  return loop.run();
}

}  // namespace wick
