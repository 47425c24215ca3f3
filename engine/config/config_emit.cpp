// The resolved config as canonical YAML (every key, canonical names, fixed order) and its hash.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <variant>

#include "engine/config/train_config.h"

namespace wick {
namespace {

// Shortest text that parses back to exactly `v` (std::to_chars round-trip guarantee).
std::string number(double v) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  std::string text(buffer, end);
  // Keep it a float to the eye: "1" -> "1.0" (both parse to the same double).
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

void key(YAML::Emitter& out, const char* name) { out << YAML::Key << name << YAML::Value; }
void put(YAML::Emitter& out, const char* name, const std::string& v) { key(out, name), out << YAML::DoubleQuoted << v; }
void put(YAML::Emitter& out, const char* name, const char* v) { key(out, name), out << v; }
void put(YAML::Emitter& out, const char* name, int64_t v) { key(out, name), out << v; }
void put(YAML::Emitter& out, const char* name, double v) { key(out, name), out << number(v); }
void put(YAML::Emitter& out, const char* name, bool v) { key(out, name), out << (v ? "true" : "false"); }

void put(YAML::Emitter& out, const char* name, const std::vector<std::string>& v) {
  key(out, name);
  out << YAML::Flow << YAML::BeginSeq;
  for (const std::string& item : v) out << YAML::DoubleQuoted << item;
  out << YAML::EndSeq;
}
void put(YAML::Emitter& out, const char* name, const std::vector<int64_t>& v) {
  key(out, name);
  out << YAML::Flow << YAML::BeginSeq;
  for (int64_t item : v) out << item;
  out << YAML::EndSeq;
}
void put(YAML::Emitter& out, const char* name, const std::vector<double>& v) {
  key(out, name);
  out << YAML::Flow << YAML::BeginSeq;
  for (double item : v) out << number(item);
  out << YAML::EndSeq;
}

void begin(YAML::Emitter& out, const char* name) {
  key(out, name);
  out << YAML::BeginMap;
}

}  // namespace

std::string to_yaml(const TrainConfig& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  put(out, "name", c.name);
  put(out, "output_dir", c.output_dir);
  put(out, "device", c.device);
  put(out, "trigger_word", c.trigger_word);

  begin(out, "model");
  put(out, "arch", c.model.arch.c_str());
  put(out, "name_or_path", c.model.name_or_path);
  put(out, "dtype", dtype_name(c.model.dtype));
  put(out, "quantize", quantize_mode_name(c.model.quantize));
  put(out, "quantize_scale", quantize_scale_name(c.model.quantize_scale));
  for (const auto& [name, value] : c.model.options.values())
    std::visit([&out, &name](const auto& v) { put(out, name.c_str(), v); }, value);
  out << YAML::EndMap;

  begin(out, "network");
  put(out, "type", network_type_name(c.network.type));
  put(out, "linear", c.network.linear);
  put(out, "linear_alpha", c.network.linear_alpha);
  put(out, "dropout", c.network.dropout);
  put(out, "target", c.network.target);
  put(out, "conv", c.network.conv);
  put(out, "conv_alpha", c.network.conv_alpha);
  out << YAML::EndMap;

  const TrainSection& t = c.train;
  begin(out, "train");
  put(out, "batch_size", t.batch_size);
  // Only when set, so that the resolved config (and its hash) of a batch_size-only run is unchanged.
  if (t.global_batch_size > 0) put(out, "global_batch_size", t.global_batch_size);
  put(out, "steps", t.steps);
  put(out, "gradient_accumulation", t.gradient_accumulation);
  put(out, "lr", t.lr);
  put(out, "optimizer", t.optimizer.c_str());
  put(out, "weight_decay", t.weight_decay);
  put(out, "betas", t.betas);
  put(out, "eps", t.eps);
  put(out, "lr_scheduler", t.lr_scheduler.c_str());
  put(out, "warmup", t.warmup);
  put(out, "max_grad_norm", t.max_grad_norm);
  if (t.gradient_checkpointing_auto && !t.gradient_checkpointing)
    put(out, "gradient_checkpointing", "auto");
  else
    put(out, "gradient_checkpointing", t.gradient_checkpointing);
  put(out, "mixed_precision", mixed_precision_name(t.mixed_precision));
  put(out, "seed", t.seed);
  put(out, "noise_scheduler", noise_scheduler_name(t.noise_scheduler));
  put(out, "prediction_type", prediction_type_name(t.prediction_type));
  put(out, "timestep_sampling", timestep_sampling_name(t.timestep_sampling));
  put(out, "logit_mean", t.logit_mean);
  put(out, "logit_std", t.logit_std);
  put(out, "mode_scale", t.mode_scale);
  put(out, "timestep_shift", t.timestep_shift);
  put(out, "caption_dropout", t.caption_dropout);
  put(out, "min_snr_gamma", t.min_snr_gamma);
  put(out, "noise_offset", t.noise_offset);
  put(out, "max_nonfinite_steps", t.max_nonfinite_steps);
  put(out, "log_every", t.log_every);
  if (std::any_of(c.datasets.begin(), c.datasets.end(), [](const DatasetConfig& d) { return d.is_reg; })) {
    put(out, "reg_ratio", t.reg_ratio);  // only with regularization data: other configs keep their hash
    put(out, "prior_loss_weight", t.prior_loss_weight);
  }
  if (t.blocks_to_swap < 0)
    put(out, "blocks_to_swap", "auto");
  else
    put(out, "blocks_to_swap", t.blocks_to_swap);
  put(out, "max_memory", t.max_memory);
  out << YAML::EndMap;

  key(out, "datasets");
  out << YAML::BeginSeq;
  for (const DatasetConfig& d : c.datasets) {
    out << YAML::BeginMap;
    put(out, "path", d.path);
    put(out, "include_labels", d.include_labels);
    put(out, "exclude_labels", d.exclude_labels);
    put(out, "caption_dropout", d.caption_dropout);
    put(out, "weight", d.weight);
    put(out, "latent_sampling", latent_sampling_name(d.latent_sampling));
    if (d.is_reg) put(out, "is_reg", true);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;

  begin(out, "save");
  put(out, "every", c.save.every);
  put(out, "keep_last", c.save.keep_last);
  put(out, "dtype", dtype_name(c.save.dtype));
  put(out, "format", lora_format_name(c.save.format));
  out << YAML::EndMap;

  begin(out, "sample");
  put(out, "every", c.sample.every);
  put(out, "prompts", c.sample.prompts);
  put(out, "negative_prompt", c.sample.negative_prompt);
  put(out, "steps", c.sample.steps);
  put(out, "guidance", c.sample.guidance);
  put(out, "seed", c.sample.seed);
  put(out, "n_per_class", c.sample.n_per_class);
  put(out, "sampler", sampler_name(c.sample.sampler));
  put(out, "width", c.sample.width);
  put(out, "height", c.sample.height);
  out << YAML::EndMap;

  begin(out, "distributed");
  put(out, "backend", comm_backend_name(c.distributed.backend));
  put(out, "shard", c.distributed.shard_auto      ? "auto"
                    : c.distributed.shard_weights ? "weights"
                    : c.distributed.shard_optimizer ? "optimizer"
                                                    : "none");
  put(out, "shard_group", c.distributed.shard_within_node ? "node" : "world");
  put(out, "bucket_mb", c.distributed.bucket_mb);
  put(out, "timeout_s", c.distributed.timeout_s);
  out << YAML::EndMap;

  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string config_hash(const TrainConfig& config) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (unsigned char byte : to_yaml(config)) {
    hash ^= byte;
    hash *= 0x100000001b3ull;  // FNV prime
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

}  // namespace wick
