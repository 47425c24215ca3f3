#include "models/diffusion/train.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "comm/launch_env.h"
#include "comm/rank_layout.h"
#include "engine/checkpoint/latest_pointer.h"
#include "engine/checkpoint/sha256.h"
#include "engine/train/preemption.h"
#include "engine/train/run_lock.h"
#include "engine/train/train_setup.h"
#include "models/diffusion/diffusion_task.h"
#include "models/memory/memory_check.h"
#include "models/diffusion/sample_grid.h"
#include "models/memory/memory_plan.h"
#include "models/memory/memory_estimate.h"
#include "models/model_factory.h"
#include "models/registry.h"

namespace fs = std::filesystem;

namespace wick {
namespace {

// Configuration choices wick cannot honour, as Config errors naming the key.
void check_supported(const TrainConfig& config) {
  const size_t n_training = config.datasets.size() - (reg_per_batch(config) > 0 ? 1 : 0);
  WICK_CHECK_KIND(Config, n_training == 1, "datasets: ", n_training, " training datasets given; wick trains on one "
                  "dataset per run so far, plus at most one regularization dataset (merge them into one file)");
  WICK_CHECK_KIND(Config, config.save.format == LoraFormat::Kohya || config.network.type != NetworkType::Full,
                  "save.format ", lora_format_name(config.save.format), " names a LoRA file format, but network.type ",
                  "full trains the whole model (its file keeps the model's own names)");
  if (config.distributed.shard_weights) {
    WICK_CHECK_KIND(Config, config.network.type != NetworkType::Full, "distributed.shard: weights shards the frozen "
                    "weights of the blocks; network.type full trains them all (use distributed.shard: optimizer, or "
                    "train a lora or dora)");
    WICK_CHECK_KIND(Config, config.train.gradient_checkpointing || config.train.gradient_checkpointing_auto,
                    "distributed.shard: weights needs train.gradient_checkpointing: true (without it backward keeps "
                    "every gathered block alive, so sharding saves nothing)");
  }
}

// The SHA-256 of the base weights for the LoRA metadata: of a single file up to 4 GiB (hashing a
// full-size Flux file would take longer than a short run); "" otherwise.
std::string base_weights_hash(const std::string& name_or_path) {
  std::error_code ec;
  fs::path path(name_or_path);
  if (path.filename() == kLatestName && fs::exists(fs::symlink_status(path, ec))) path = resolve_checkpoint_path(path);
  if (fs::is_directory(path, ec) && fs::is_regular_file(path / "model.safetensors", ec)) path /= "model.safetensors";
  if (!fs::is_regular_file(path, ec)) return "";
  const auto bytes = fs::file_size(path, ec);
  if (ec || bytes > (uint64_t{4} << 30)) return "";
  return sha256_file(path.string());
}

// The device of this rank: NCCL's GPU (the node-local rank's), and for several ranks on the CUDA
// device of the config with the MPI backend the same choice (gpu_for_local_rank): the configured
// index is ignored then, so that ranks on one node do not all take one GPU.
Device rank_device(const comm::ProcessGroup& group, Device configured) {
  if (group.device().is_cuda()) return group.device();
  if (!configured.is_cuda() || group.size() == 1) return configured;
  return Device::cuda(comm::gpu_for_local_rank(group.local_rank(), cuda_device_count()));
}

// Rank 0's start-up lines: where the ranks run, one line per node.
void report_rank_places(const comm::ProcessGroup& group, const std::vector<comm::RankPlace>& places) {
  std::fprintf(stderr, "wick train: %d ranks on %d node%s (%s):\n", group.size(), group.n_nodes(),
               group.n_nodes() == 1 ? "" : "s", group.backend().c_str());
  std::string text = comm::describe_rank_places(places);
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::fprintf(stderr, "wick train:   %s\n", text.substr(start, end - start).c_str());
    start = end + 1;
  }
}

// The memory plan (models/memory/memory_plan.h) where the config leaves checkpointing, quantization or
// swapping at auto and a budget is known; `model` (built with every auto setting off) is rebuilt
// when the plan turns one on. Returns the config with the plan's choices written in.
TrainConfig apply_memory_plan(const TrainConfig& config, std::shared_ptr<DiffusionModel>& model,
                              const DataGeometry& geometry, comm::ProcessGroup& group, Device device) {
  const PlanChoices choices = choices_of(config);
  if (choices.gradient_checkpointing && choices.float8 && choices.blocks_to_swap && choices.shard_weights) return config;
  const std::optional<int64_t> budget = memory_budget(config, device);
  if (!budget) return config;
  const std::string source = config.train.max_memory > 0 ? "train.max_memory budget" : device.str() + " has";
  const MemoryPlan plan =
      plan_memory(*model, memory_inputs(config, geometry, group, device), choices, *budget, source);
  if (group.rank() == 0) {
    std::fprintf(stderr, "%s\n", describe(plan).c_str());
    if (!plan.fits) std::fprintf(stderr, "wick train: memory plan: %s\n", refusal(plan, choices).c_str());
  }
  TrainConfig planned = with_plan(config, plan);
  const auto float8 = [](const TrainConfig& c) { return c.model.quantize == QuantizeMode::Float8; };
  const bool changed = planned.train.gradient_checkpointing != config.train.gradient_checkpointing ||
                       float8(planned) != float8(config) ||
                       planned.train.blocks_to_swap != std::max<int64_t>(0, config.train.blocks_to_swap) ||
                       planned.distributed.shard_weights != config.distributed.shard_weights;
  if (changed) {
    model.reset();  // its memory back before the planned model loads
    model = build_model(planned, geometry, device);
  }
  return planned;
}

}  // namespace

fs::path run_directory(const TrainConfig& config) { return fs::path(config.output_dir) / config.name; }

TrainResult train(const TrainConfig& requested, const TrainOptions& options) {
  check_supported(requested);
  TrainConfig config = requested;
  if ((config.train.blocks_to_swap > 0 || config.distributed.shard_weights) && config.train.gradient_checkpointing_auto) {
    config.train.gradient_checkpointing = true;  // swapping and sharding need it; auto is the only choice left
    config.train.gradient_checkpointing_auto = false;
  }
  Device device = select_device(config.device);
  std::shared_ptr<comm::ProcessGroup> group = comm::make_process_group(
      comm_backend_name(config.distributed.backend), device, static_cast<double>(config.distributed.timeout_s));
  const bool rank0 = group->rank() == 0;
  // From here on a SIGTERM / SIGUSR1 (a preemption while the data and the model load) is kept, and the run
  // stops after step 1 with a checkpoint and exit status 75 (the step loop reads this watch).
  std::optional<PreemptionWatch> watch;
  if (!PreemptionWatch::installed()) watch.emplace(group->rank(), group->size());
  device = rank_device(*group, device);
  if (group->size() > 1) {
    const std::vector<comm::RankPlace> places = comm::gather_rank_places(*group, device);
    if (rank0) report_rank_places(*group, places);
  }
  const fs::path run_dir = run_directory(config);
  // One job per run directory, held by rank 0 until train() returns (engine/train/run_lock.h); --resume auto waits
  // kRunLockWaitSeconds for a job that is ending (a requeue right after a kill), other resumes refuse at once.
  // Taken after the directory checks, so that a run refused by them leaves no lock file behind.
  std::optional<RunLock> run_lock;
  if (rank0 && !options.dry_run) check_output_directory(run_dir, options.resume);
  if (!options.dry_run) check_run_directory_shared(*group, run_dir);
  if (rank0 && !options.dry_run)
    run_lock = RunLock::acquire(run_dir, {.wait_s = options.resume == "auto" ? kRunLockWaitSeconds : 0.0});
  TrainingData data = open_training_data(config.datasets[0], /*validate=*/true);
  // The regularization samples: the same file (the config checks it), so validated already.
  const int64_t n_reg_per_batch = reg_per_batch(config);
  TrainingData reg_data;
  if (n_reg_per_batch > 0) reg_data = open_training_data(config.datasets[1], /*validate=*/false);
  // Every rank checks (the same config fails the same way everywhere); rank 0 makes the grids.
  std::shared_ptr<ImageSampler> sampler = prepare_sampling(config, data, device);
  if (rank0 && sampler) std::fprintf(stderr, "wick train: sample images: %s\n", sampler->describe().c_str());
  const DataGeometry geometry = dataset_geometry(*data.dataset);
  std::shared_ptr<DiffusionModel> model = build_model(config, geometry, device);
  config = apply_memory_plan(config, model, geometry, *group, device);
  // The gathers get a communicator of their own: they never interleave with the gradient buckets.
  if (config.distributed.shard_weights)
    attach_weight_shards(*model,
                         comm::make_process_group(comm_backend_name(config.distributed.backend), device,
                                                  static_cast<double>(config.distributed.timeout_s),
                                                  config.distributed.shard_within_node),
                         device, std::max<int64_t>(0, config.train.blocks_to_swap));
  // Before anything else is allocated: the estimate (rank 0 prints it), and the refusal of a run
  // that cannot fit (docs/training.md "Memory").
  const TrainingMemory memory = check_training_memory(config, *model, geometry, *group, device);
  if (options.dry_run) {
    if (rank0)
      std::fprintf(stderr,
                   "wick train: %s: dry run: the config, the dataset, the weights and the memory plan are checked; "
                   "nothing was trained or written (the run would write to %s)\n",
                   config.name.c_str(), run_dir.string().c_str());
    TrainResult result;
    result.resolved_config = to_yaml(config);
    return result;
  }
  const std::string base_hash =
      rank0 && !config.model.name_or_path.empty() ? base_weights_hash(config.model.name_or_path) : "";

  DiffusionTask task(config, model, data, run_dir, base_hash, sampler, group->rank());
  StepLoopSetup setup{.name = config.name,
                      .run_dir = run_dir,
                      .config_yaml = to_yaml(config),
                      .config_hash = config_hash(config),
                      .train = config.train,
                      .save = config.save,
                      .distributed = config.distributed,
                      .group = group,
                      .device = device,
                      .dataset = data.dataset,
                      .ids = data.ids,
                      .bucket_of = data.bucket_of,
                      .reg_ids = reg_data.ids,
                      .reg_bucket_of = reg_data.bucket_of,
                      .reg_per_batch = n_reg_per_batch,
                      .memory_estimate_bytes = memory.estimate.total,
                      .share_splits = memory.share_splits};
  TrainResult result;
  static_cast<LoopResult&>(result) = run_step_loop(task, setup, options);
  result.lora_file = task.lora_file();
  result.model_file = task.model_file();
  result.sample_grids = task.sample_grids();
  const BlockSwapper* shards = model->block_swapper();
  if (rank0 && shards && shards->sharded() && result.last_step >= result.first_step) {
    const BlockSwapper::Stats s = shards->stats();
    const double steps = static_cast<double>(result.last_step - result.first_step + 1);
    std::fprintf(stderr,
                 "wick train: weight gathers on rank 0: %.1f blocks and %s received per step (%lld prefetched of "
                 "%lld); %.2f s waited for gathers in %lld steps\n",
                 static_cast<double>(s.n_block_copies) / steps,
                 format_bytes(static_cast<int64_t>(static_cast<double>(s.bytes_copied) / steps)).c_str(),
                 static_cast<long long>(s.n_prefetch_hits), static_cast<long long>(s.n_block_copies), s.wait_s,
                 static_cast<long long>(steps));
  }
  if (rank0 && result.last_step >= result.first_step) {
    std::fprintf(stderr, "wick train: %s: outputs in %s", config.name.c_str(), run_dir.string().c_str());
    if (result.last_checkpoint) std::fprintf(stderr, " (checkpoint %s", result.last_checkpoint->string().c_str());
    if (result.lora_file) std::fprintf(stderr, ", LoRA %s", result.lora_file->string().c_str());
    if (result.model_file) std::fprintf(stderr, ", model %s", result.model_file->string().c_str());
    std::fprintf(stderr, "%s\n", result.last_checkpoint ? ")" : "");
  }
  // Stopped on request: `wick train` ends the job (exit status 75) as soon as a rank returns, so
  // every rank waits here until rank 0 has written its files and messages.
  if (result.preempted) group->barrier();
  return result;
}

}  // namespace wick
