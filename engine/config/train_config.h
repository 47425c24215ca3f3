// The training configuration: a typed tree with defaults, parsed from YAML (wick's own shape, or
// ai-toolkit's / EriDiffusion's `config: process: [ ... ]` shape), checked key by key.
//
//   std::vector<std::string> notes;
//   TrainConfig config = parse_config_file("configs/quickstart.yaml", {"train.lr=3e-4"}, &notes);
//   write_text(run_dir / "config.yaml", to_yaml(config));      // resolved: every key, defaults filled
//   manifest["config_hash"] = config_hash(config);             // stable across runs and machines
//
// Every error is a WickError of kind Config whose message starts with where the mistake is:
// "<file>:<line>:<column>: " for the file, "--set <argument>: " for an override. Keys and their
// aliases are listed in docs/config.md.
//
// The parser knows no architecture: `schema` (models/registry.h `config_schema()`) lists the
// architectures with the `model:` keys each owns; model.arch picks one (an unknown name lists them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <functional>
#include <optional>
#include <utility>

#include "engine/config/model_options.h"
#include "runtime/dtype.h"

namespace wick {

enum class NetworkType { Lora, Dora, Full };
enum class MixedPrecision { No, BF16, FP16 };
enum class NoiseScheduler { FlowMatch, Ddpm };
// What a DDPM model predicts: the noise ε (SDXL base, SD 1.x) or v = √ᾱ·ε − √(1 − ᾱ)·x0 (SD 2.x 768-v, v-pred
// fine-tunes). Flow matching always predicts its velocity.
enum class PredictionType { Epsilon, V };
enum class TimestepSampling { LogitNormal, Uniform, Shift, FluxShift, QwenShift, Mode };
enum class SamplerKind { Auto, Euler, Ddim };
enum class CommBackend { Auto, Nccl, Mpi, None };
enum class LoraFormat { Kohya, Peft };
// What a training step takes from a dataset holding the VAE's distribution (latents_logvar): a sample
// mean + exp(logvar / 2) * eps (eps from Philox (seed, sample id, epoch, LatentSample)), or the mean.
// Files without latents_logvar train on their stored latents either way.
enum class LatentSampling { Sample, Mean };
// How the frozen base is stored (docs/models.md "Float8 base"): auto lets `wick train`'s memory plan
// choose (models/memory/memory_plan.h: none when the run fits); none keeps model.dtype; float8 stores frozen
// Linear weights of the transformer blocks as e4m3 with f32 scales.
enum class QuantizeMode { Auto, None, Float8 };
enum class QuantizeScale { PerRow, PerTensor };  // one f32 scale per output row, or one per weight

// Canonical config spellings ("lora", "bf16", "flowmatch", ...).
const char* network_type_name(NetworkType value);
const char* mixed_precision_name(MixedPrecision value);
const char* noise_scheduler_name(NoiseScheduler value);
const char* prediction_type_name(PredictionType value);
const char* timestep_sampling_name(TimestepSampling value);
const char* sampler_name(SamplerKind value);
const char* comm_backend_name(CommBackend value);
const char* lora_format_name(LoraFormat value);
const char* latent_sampling_name(LatentSampling value);
const char* quantize_mode_name(QuantizeMode value);
const char* quantize_scale_name(QuantizeScale value);

// What an architecture contributes to the config (models/registry.h builds one per registered
// architecture): its names, the ai-toolkit flag that selects it, the `model:` keys it owns, and the
// defaults it gives keys of other sections.
struct ArchSchema {
  std::string name;                          // "dit", "flux"
  std::vector<std::string> aliases = {};     // accepted spellings of model.arch ("flux1")
  std::string flag = {};                     // ai-toolkit's boolean that selects it ("is_flux"), or ""
  std::vector<std::string> flag_aliases = {};  // other spellings of that boolean ("is_xl")
  std::vector<OptionKey> keys = {};          // model.<key>
  std::vector<std::string> ignored = {};     // model.<key> accepted with a note (no meaning for it)
  bool needs_base_weights = false;           // model.name_or_path required
  NoiseScheduler default_noise_scheduler = NoiseScheduler::FlowMatch;
  // Whether sample.width / sample.height choose the size of sample images (Flux); false: the model
  // samples at the dataset's latent size and the two keys are noted as ignored.
  bool sample_size = false;
  // sample.guidance when the config gives none; nullopt: SampleConfig's (4.0, classifier-free). Flux:
  // 3.5, the distilled guidance input of dev.
  std::optional<double> default_sample_guidance = std::nullopt;
  // What sample.sampler auto resolves to; nullopt: euler for flowmatch, ddim for ddpm. SDXL: euler (diffusers'
  // EulerDiscreteScheduler for its DDPM model).
  std::optional<SamplerKind> default_sampler = std::nullopt;
  LoraFormat default_lora_format = LoraFormat::Kohya;  // save.format when the config sets none
  // Checks across its keys: the (key, message) of the first problem, or nullopt.
  std::function<std::optional<std::pair<std::string, std::string>>(const ModelOptions&)> check = {};
};

struct ConfigSchema {
  std::vector<ArchSchema> archs;
  std::string default_arch;                  // model.arch when a config names none
  // The schema of a name or alias (case-insensitive), nullptr when none matches.
  const ArchSchema* find(const std::string& name) const;
  // "dit, flux" (the names, for messages).
  std::string names() const;
};

struct ModelConfig {
  std::string arch;                  // a registered architecture's canonical name (also set by its flag,
                                     // e.g. is_flux: true)
  std::string name_or_path;          // base weights (file, folder or checkpoint directory); "" = from scratch
  DType dtype = DType::F32;          // storage dtype of the frozen base weights: f32 | bf16 | f16
  QuantizeMode quantize = QuantizeMode::Auto;        // auto | none | float8 (a float8 checkpoint stays float8)
  QuantizeScale quantize_scale = QuantizeScale::PerRow;
  ModelOptions options;              // the architecture's own keys, checked, defaults filled
  bool operator==(const ModelConfig&) const = default;
};

struct NetworkConfig {
  NetworkType type = NetworkType::Full;
  int64_t linear = 16;                 // rank
  double linear_alpha = 16.0;          // defaults to `linear` when not given
  double dropout = 0.0;                // on the adapter's input, [0, 1)
  int64_t conv = 0;                    // LoCon: the rank of adapters on convolutions larger than 1x1 (0 = none); the
                                       // architecture's conv targets (kohya's conv_dim set) take it
  double conv_alpha = 0.0;             // their alpha; defaults to `conv` when not given
  std::vector<std::string> target;     // glob patterns over module paths, or the arch's preset names
                                       // (attention, attention_mlp, all); empty = the arch's default
  bool operator==(const NetworkConfig&) const = default;
};

// SD3's shift s, which `train.timestep_sampling: shift` applies when train.timestep_shift is not given
// (as ai-toolkit's SD flow-matching scheduler config does).
inline constexpr double kDefaultTimestepShift = 3.0;

struct TrainSection {
  int64_t batch_size = 1;              // per rank, per micro-step (when global_batch_size is 0)
  int64_t global_batch_size = 0;       // samples per micro-step over all ranks (0 = batch_size x ranks);
                                       // each rank takes floor or ceil of it / ranks (docs/distributed.md)
  int64_t steps = 1000;                // optimizer steps
  int64_t gradient_accumulation = 1;
  double lr = 1e-4;
  std::string optimizer = "adamw8bit"; // adamw8bit | adamw | sgd
  double weight_decay = 1e-2;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
  std::string lr_scheduler = "constant";  // a name from lr_schedule_names()
  int64_t warmup = 0;                  // lr warmup steps
  double max_grad_norm = 1.0;          // 0 = no clipping
  bool gradient_checkpointing = false;
  // The config left gradient_checkpointing at auto: the memory plan may turn it on (models/memory/memory_plan.h);
  // the plan then sets gradient_checkpointing and clears this.
  bool gradient_checkpointing_auto = true;
  // Transformer blocks whose frozen weights stay in pinned host memory and are streamed to the device
  // just before they run (engine/block_swap.h); -1 = auto: the memory plan decides (0 when the run fits).
  int64_t blocks_to_swap = -1;
  // What the run's tensors must fit in on each rank, in bytes (`wick train --max-memory 24GB`);
  // 0 = what the device has. The memory plan fits the run into it.
  int64_t max_memory = 0;
  MixedPrecision mixed_precision = MixedPrecision::No;
  int64_t seed = 42;
  NoiseScheduler noise_scheduler = NoiseScheduler::FlowMatch;  // default ddpm for arch sdxl
  PredictionType prediction_type = PredictionType::Epsilon;    // ddpm: ε or v; flowmatch: epsilon (unused)
  TimestepSampling timestep_sampling = TimestepSampling::LogitNormal;
  double logit_mean = 0.0;             // logit_normal: sigma = sigmoid(N(logit_mean, logit_std))
  double logit_std = 1.0;
  double mode_scale = 1.29;            // mode: σ = 1 − u − s·(cos²(πu/2) − 1 + u), u ~ U[0, 1) (SD3 paper §3.1;
                                       // 1.29 as diffusers' and kohya's SD3 scripts)
  double timestep_shift = 1.0;         // SD3 shift applied to sigma (1 = none); timestep_sampling shift
                                       // without it: kDefaultTimestepShift. flux_shift: the
                                       // resolution-dependent shift of Flux instead; qwen_shift:
                                       // Qwen-Image's (μ 0.5 at 256 tokens to 0.9 at 8192)
  double caption_dropout = 0.0;        // probability a caption is replaced by the empty one
  double min_snr_gamma = 0.0;          // 0 = off
  double noise_offset = 0.0;           // 0 = off
  int64_t max_nonfinite_steps = 10;    // non-finite losses in a row before the run stops (status 4)
  int64_t log_every = 10;              // metrics.jsonl / TensorBoard every N steps
  // With a regularization dataset (DatasetConfig::is_reg): the share of every batch drawn from it
  // (round(reg_ratio x batch_size) samples per rank, at least 1 and at most batch_size - 1; with
  // global_batch_size G, round(reg_ratio x G) per global batch, between 1 and G - 1), and the
  // factor on those samples' loss (kohya's prior_loss_weight). Setting either without one is an error.
  double reg_ratio = 0.5;
  double prior_loss_weight = 1.0;
  bool operator==(const TrainSection&) const = default;
};

struct DatasetConfig {
  std::string path;                    // cached-latent HDF5 file (required)
  std::vector<int64_t> include_labels; // keep only samples whose label is listed (empty = all)
  std::vector<int64_t> exclude_labels; // drop samples whose label is listed
  double caption_dropout = -1.0;       // per dataset; resolved to train.caption_dropout when not given
  double weight = 1.0;                 // relative sampling weight among datasets; with one dataset
                                       // anything but 1 is a Config error
  LatentSampling latent_sampling = LatentSampling::Sample;  // sample | mean (files with latents_logvar)
  bool is_reg = false;                 // regularization data (kohya's reg images, ai-toolkit's is_reg):
                                       // mixed into every batch at train.reg_ratio, its loss weighted by
                                       // train.prior_loss_weight; at most one, beside one training dataset
  bool operator==(const DatasetConfig&) const = default;
};

struct SaveConfig {
  int64_t every = 250;                 // checkpoint every N steps (0 = only at the end)
  int64_t keep_last = 4;               // checkpoints kept (0 = all)
  DType dtype = DType::F16;            // dtype of exported LoRA / model weights
  LoraFormat format = LoraFormat::Kohya;  // LoRA file naming: kohya (ComfyUI) or peft (diffusers); default
                                          // the architecture's (ArchSchema::default_lora_format)
  bool operator==(const SaveConfig&) const = default;
};

struct SampleConfig {
  int64_t every = 0;                   // sample grid every N steps (0 = off)
  std::vector<std::string> prompts;
  std::string negative_prompt;
  int64_t steps = 20;
  double guidance = 4.0;               // classifier-free guidance scale (1 = none); Flux dev: its guidance
                                       // input (default 3.5), schnell: none
  int64_t seed = 42;
  int64_t n_per_class = 0;             // > 0: one grid row per dataset class, this many images each
  int64_t width = 0, height = 0;       // image pixels, for architectures that sample at a chosen size
                                       // (ArchSchema::sample_size); 0 = the dataset's first bucket's size
  SamplerKind sampler = SamplerKind::Auto;  // auto: euler for flowmatch, ddim for ddpm
  bool operator==(const SampleConfig&) const = default;
};

struct DistributedConfig {
  CommBackend backend = CommBackend::Auto;
  bool shard_optimizer = true;         // ZeRO-1 (distributed.shard: optimizer or weights)
  bool shard_weights = false;          // ZeRO-3 of the blocks' frozen weights (distributed.shard: weights)
  bool shard_auto = false;             // distributed.shard: auto: the memory plan chooses optimizer or weights
  bool shard_within_node = false;      // distributed.shard_group: node (shard inside a node, replicate across)
  int64_t bucket_mb = 25;
  int64_t timeout_s = 600;
  bool operator==(const DistributedConfig&) const = default;
};

struct TrainConfig {
  std::string name;                    // required: the run directory is <output_dir>/<name>
  std::string output_dir = "output";
  std::string device = "auto";         // auto | cpu | cuda | cuda:N
  std::string trigger_word;            // replaces "[trigger]" in prompts encoded at sampling time
  ModelConfig model;
  NetworkConfig network;
  TrainSection train;
  std::vector<DatasetConfig> datasets; // `dataset:` (one) or `datasets:` (a list); at least one
  SaveConfig save;
  SampleConfig sample;
  DistributedConfig distributed;
  bool operator==(const TrainConfig&) const = default;
};

// A size in bytes: "24GB" (10^9 bytes per GB, as wick prints sizes), "24GiB" (2^30), "800MB", "1.5 TB",
// or a plain byte count; nullopt for anything else.
std::optional<int64_t> parse_byte_size(const std::string& text);

// Parses YAML text. `source` names it in error messages (a file path, or e.g. "<string>").
// `overrides` are "key.path=value" strings (as given to --set), applied after the text, value parsed
// as YAML (scalar or [list]); a list element is addressed by index ("datasets.0.path=..."), and
// `dataset.KEY` addresses the first dataset. `notes`, if given, receives one line per accepted
// key that wick ignores (ai-toolkit options with no meaning here), with its location; `warnings`
// one line per setting that would change training in ai-toolkit but does not in wick (an ignored
// ai-toolkit option with a value other than wick's behaviour, trigger_word), with its location.
TrainConfig parse_config_string(const std::string& text, const std::string& source, const ConfigSchema& schema,
                                const std::vector<std::string>& overrides = {},
                                std::vector<std::string>* notes = nullptr,
                                std::vector<std::string>* warnings = nullptr);
// What the warning about a non-empty trigger_word says (parse_config_* adds it, after the key's location): training
// cannot put the word into captions encoded ahead of time. `wick train` drops it when every training dataset
// records that its captions were encoded with the same word (LatentDatasetAttributes::trigger_word).
std::string trigger_word_warning(const std::string& trigger_word);
// Reads and parses a file; a missing or unreadable file is a Config error naming the path.
TrainConfig parse_config_file(const std::string& path, const ConfigSchema& schema,
                              const std::vector<std::string>& overrides = {},
                              std::vector<std::string>* notes = nullptr,
                              std::vector<std::string>* warnings = nullptr);

// With a regularization dataset (is_reg): the regularization samples in each rank's batch,
// round(train.reg_ratio x train.batch_size), or with train.global_batch_size G in each global batch,
// round(train.reg_ratio x G) (spread over the ranks with the rest of the global batch: DistributedSampler);
// 0 without one. A parsed config lists the training
// dataset first (datasets[0]) and the regularization dataset, if any, second.
int64_t reg_per_batch(const TrainConfig& config);

// The resolved config as YAML in wick's canonical shape: every key under its canonical name, in a
// fixed order, defaults filled. parse_config_string(to_yaml(c), ...) == c.
std::string to_yaml(const TrainConfig& config);
// 16 lowercase hex digits: FNV-1a 64 over to_yaml(config). Equal configs hash equal on any machine.
std::string config_hash(const TrainConfig& config);

}  // namespace wick
