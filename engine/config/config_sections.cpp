// Parsing the training config, its sections: the key tables of every section (with ai-toolkit /
// EriDiffusion aliases) and of the top level, the enum tables, the architecture a `model:` mapping
// selects. The whole file's entry points, ai-toolkit's `config: process:` wrapper, --set overrides
// and the checks that span several keys are in config_parse.cpp.
#include "engine/config/config_sections.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "engine/config/config_reader.h"
#include "engine/config/train_config.h"
#include "engine/optim/lr_schedule.h"
#include "runtime/error.h"

namespace wick {

using config_detail::ConfigContext;
using config_detail::EnumTable;
using config_detail::flag_off;
using config_detail::is_empty;
using config_detail::KeyDef;
using config_detail::is_false;
using config_detail::number_is;
using config_detail::Range;
using config_detail::scalar_in;
using config_detail::Section;
using config_detail::parse_dataset;

namespace {

const EnumTable<NetworkType> network_table = {
    {{"lora", NetworkType::Lora}, {"dora", NetworkType::Dora}, {"full", NetworkType::Full}},
    {{"none", NetworkType::Full}}};
const EnumTable<MixedPrecision> precision_table = {
    {{"no", MixedPrecision::No}, {"bf16", MixedPrecision::BF16}, {"fp16", MixedPrecision::FP16}},
    {{"none", MixedPrecision::No}, {"f32", MixedPrecision::No}, {"fp32", MixedPrecision::No},
     {"float32", MixedPrecision::No}, {"bfloat16", MixedPrecision::BF16}, {"f16", MixedPrecision::FP16},
     {"float16", MixedPrecision::FP16}}};
const EnumTable<NoiseScheduler> scheduler_table = {
    {{"flowmatch", NoiseScheduler::FlowMatch}, {"ddpm", NoiseScheduler::Ddpm}},
    {{"flow_match", NoiseScheduler::FlowMatch}, {"rectified_flow", NoiseScheduler::FlowMatch},
     {"epsilon", NoiseScheduler::Ddpm}}};
const EnumTable<PredictionType> prediction_table = {
    {{"epsilon", PredictionType::Epsilon}, {"v_prediction", PredictionType::V}},
    {{"eps", PredictionType::Epsilon}, {"v", PredictionType::V}, {"v_pred", PredictionType::V},
     {"v-prediction", PredictionType::V}}};
const EnumTable<TimestepSampling> timestep_table = {
    {{"logit_normal", TimestepSampling::LogitNormal}, {"uniform", TimestepSampling::Uniform},
     {"shift", TimestepSampling::Shift}, {"flux_shift", TimestepSampling::FluxShift},
     {"qwen_shift", TimestepSampling::QwenShift}, {"mode", TimestepSampling::Mode}},
    {{"sigmoid", TimestepSampling::LogitNormal}, {"linear", TimestepSampling::Uniform},
     {"flux", TimestepSampling::FluxShift}, {"none", TimestepSampling::Uniform}}};
const EnumTable<SamplerKind> sampler_table = {
    {{"auto", SamplerKind::Auto}, {"euler", SamplerKind::Euler}, {"ddim", SamplerKind::Ddim}},
    {{"flowmatch", SamplerKind::Euler}}};
const EnumTable<CommBackend> backend_table = {
    {{"auto", CommBackend::Auto}, {"nccl", CommBackend::Nccl}, {"mpi", CommBackend::Mpi},
     {"none", CommBackend::None}}};
const EnumTable<LoraFormat> lora_format_table = {{{"kohya", LoraFormat::Kohya}, {"peft", LoraFormat::Peft}},
                                                 {{"comfyui", LoraFormat::Kohya}, {"diffusers", LoraFormat::Peft}}};
const EnumTable<QuantizeMode> quantize_table = {
    {{"auto", QuantizeMode::Auto}, {"none", QuantizeMode::None}, {"float8", QuantizeMode::Float8}},
    {{"false", QuantizeMode::None}, {"no", QuantizeMode::None}, {"off", QuantizeMode::None},
     {"true", QuantizeMode::Float8}, {"yes", QuantizeMode::Float8}, {"on", QuantizeMode::Float8},
     {"fp8", QuantizeMode::Float8}, {"qfloat8", QuantizeMode::Float8}, {"float8_e4m3fn", QuantizeMode::Float8},
     {"e4m3", QuantizeMode::Float8}}};
const EnumTable<QuantizeScale> quantize_scale_table = {
    {{"per_row", QuantizeScale::PerRow}, {"per_tensor", QuantizeScale::PerTensor}},
    {{"row", QuantizeScale::PerRow}, {"per_channel", QuantizeScale::PerRow}, {"tensor", QuantizeScale::PerTensor}}};
const EnumTable<LatentSampling> latent_sampling_table = {
    {{"sample", LatentSampling::Sample}, {"mean", LatentSampling::Mean}}, {{"mode", LatentSampling::Mean}}};

template <typename E>
const char* name_in(const EnumTable<E>& table, E value) {
  for (const auto& [name, v] : table.canonical)
    if (v == value) return name.c_str();
  return "?";
}

const std::vector<std::string> optimizer_choices = {"adamw8bit", "adamw", "sgd"};

// ---- sections ----

std::string lowercase(std::string text) {
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// An architecture's ai-toolkit booleans: its flag and the flag's other spellings.
std::vector<std::string> arch_flags(const ArchSchema& arch) {
  std::vector<std::string> flags;
  if (!arch.flag.empty()) flags.push_back(arch.flag);
  flags.insert(flags.end(), arch.flag_aliases.begin(), arch.flag_aliases.end());
  return flags;
}

// The architecture a `model:` mapping selects: model.arch (or its alias `architecture`), else a
// true ai-toolkit flag (is_flux, ...), else `current` (the arch chosen so far: the file's, when an
// override names no arch). Contradictions and unknown names fail with the registered names.
const ArchSchema& select_arch(ConfigContext& ctx, const YAML::Node& node, const std::string& current) {
  const ConfigSchema& schema = *ctx.schema;
  const ArchSchema* chosen = nullptr;
  YAML::Node chosen_at;
  for (const char* key : {"arch", "architecture"}) {
    YAML::Node value = node.IsMap() ? node[key] : YAML::Node();
    if (!value.IsDefined() || value.IsNull()) continue;
    if (!value.IsScalar()) ctx.fail(value, std::string("model.") + key + " must be a string");
    chosen = schema.find(value.Scalar());
    if (!chosen)
      ctx.fail(value, "model.arch: unknown architecture '" + value.Scalar() + "'; registered: " + schema.names());
    chosen_at = value;
  }
  const ArchSchema* by_flag = nullptr;
  std::string by_flag_key;
  for (const ArchSchema& arch : schema.archs) {
    if (!node.IsMap()) continue;
    for (const std::string& flag : arch_flags(arch)) {
      YAML::Node value = node[flag];
      if (!value.IsDefined() || !value.IsScalar()) continue;
      const std::string text = lowercase(value.Scalar());
      if (text != "true" && text != "yes" && text != "on") continue;
      if (by_flag && by_flag != &arch) ctx.fail(value, "model." + by_flag_key + " and model." + flag + " are both true");
      if (chosen && chosen != &arch)
        ctx.fail(value, "model." + flag + ": true contradicts model.arch '" + chosen->name + "'");
      chosen = by_flag = &arch;
      by_flag_key = flag;
      chosen_at = value;
    }
  }
  if (chosen) {
    ctx.set_at["model.arch"] = ctx.where(chosen_at);
    return *chosen;
  }
  const ArchSchema* kept = schema.find(current.empty() ? schema.default_arch : current);
  WICK_CHECK(kept != nullptr, "config schema: no architecture '", current, "' (default '", schema.default_arch, "')");
  return *kept;
}

// Reads one declared key of an architecture into `options` (type and range checked, with the
// key's location on failure).
void read_option(Section& s, const OptionKey& key, ModelOptions& options) {
  switch (key.type) {
    case OptionType::Bool: {
      bool v = std::get<bool>(key.default_value);
      if (s.get_bool(key.name, v)) options.set(key.name, v);
      break;
    }
    case OptionType::Int: {
      int64_t v = 0;
      if (s.get_int(key.name, v, key.range)) options.set(key.name, v);
      break;
    }
    case OptionType::Float: {
      double v = 0;
      if (s.get_float(key.name, v, key.range)) options.set(key.name, v);
      break;
    }
    case OptionType::String: {
      std::string v;
      if (key.choices.empty() ? s.get_string(key.name, v) : s.get_choice(key.name, v, key.choices))
        options.set(key.name, v);
      break;
    }
    case OptionType::IntList: {
      std::vector<int64_t> v;
      if (s.get_int_list(key.name, v, key.range)) options.set(key.name, v);
      break;
    }
    case OptionType::FloatList: {
      std::vector<double> v;
      if (s.get_float_list(key.name, v, key.range)) options.set(key.name, v);
      break;
    }
    case OptionType::StringList: {
      std::vector<std::string> v;
      if (s.get_string_list(key.name, v)) options.set(key.name, v);
      break;
    }
  }
}

void parse_model(ConfigContext& ctx, const YAML::Node& node, ModelConfig& m) {
  const ArchSchema& arch = select_arch(ctx, node, m.arch);
  if (arch.name != m.arch) {  // a new architecture: its own keys, at their defaults
    m.arch = arch.name;
    m.options = ModelOptions::defaults(arch.keys);
  }
  std::vector<KeyDef> keys = {{"arch", {"architecture"}}, {"name_or_path", {"path", "pretrained_model_name_or_path"}},
                              {"dtype"}, {"quantize", {"fp8_base"}}, {"quantize_scale"}};
  for (const ArchSchema& other : ctx.schema->archs)
    for (const std::string& flag : arch_flags(other)) keys.push_back({flag});
  for (const OptionKey& key : arch.keys) keys.push_back({key.name, key.aliases});
  // A key of another architecture gets a message that says so (rather than "unknown key").
  if (node.IsMap())
    for (const auto& entry : node) {
      const std::string key = entry.first.Scalar();
      bool known = false;
      for (const KeyDef& def : keys)
        known = known || def.name == key || std::find(def.aliases.begin(), def.aliases.end(), key) != def.aliases.end();
      if (known || std::find(arch.ignored.begin(), arch.ignored.end(), key) != arch.ignored.end()) continue;
      for (const ArchSchema& other : ctx.schema->archs)
        for (const OptionKey& option : other.keys)
          if (&other != &arch && (option.name == key ||
                                  std::find(option.aliases.begin(), option.aliases.end(), key) != option.aliases.end()))
            ctx.fail(entry.first, "model." + key + " is a key of arch " + other.name + ", but this config's model.arch is " +
                                      arch.name + " (its keys: " +
                                      [&] {
                                        std::vector<std::string> names;
                                        for (const OptionKey& k : arch.keys) names.push_back(k.name);
                                        return names.empty() ? std::string("none") : config_detail::join(names);
                                      }() + ")");
    }
  std::vector<std::string> ignored = {"quantize_te", "low_vram"};
  ignored.insert(ignored.end(), arch.ignored.begin(), arch.ignored.end());
  Section s(ctx, node, "model", keys, ignored,
            {{"qtype", "wick quantizes the base to float8 e4m3 (model.quantize: float8) only",
              scalar_in({"qfloat8", "float8", "fp8", "float8_e4m3fn"})}});
  for (const ArchSchema& other : ctx.schema->archs) {  // flags: type-checked; a false one asks for nothing
    bool on = false;
    for (const std::string& flag : arch_flags(other)) s.get_bool(flag, on);
  }
  s.get_string("name_or_path", m.name_or_path);
  s.get_dtype("dtype", m.dtype);
  s.get_enum("quantize", m.quantize, quantize_table);
  s.get_enum("quantize_scale", m.quantize_scale, quantize_scale_table);
  for (const OptionKey& key : arch.keys) read_option(s, key, m.options);
}

void parse_network(ConfigContext& ctx, const YAML::Node& node, NetworkConfig& n) {
  Section s(ctx, node, "network",
            {{"type", {"adapter_type"}}, {"linear", {"rank", "network_dim"}},
             {"linear_alpha", {"alpha", "network_alpha"}}, {"dropout", {"network_dropout"}},
             {"target", {"target_modules"}}, {"conv", {"conv_dim", "conv_rank"}}, {"conv_alpha"}},
            {},
            {{"network_kwargs", "wick chooses the adapted modules by network.target alone", is_empty()}});
  s.get_enum("type", n.type, network_table);
  s.get_int("linear", n.linear, Range::above(0));
  s.get_float("linear_alpha", n.linear_alpha, Range::above(0));
  s.get_float("dropout", n.dropout, Range::between(0, 1, true));
  s.get_string_list("target", n.target);
  s.get_int("conv", n.conv, Range::at_least(0));
  s.get_float("conv_alpha", n.conv_alpha, Range::at_least(0));  // 0 with conv 0 (written back that way)
}

void parse_train(ConfigContext& ctx, const YAML::Node& node, TrainSection& t) {
  Section s(ctx, node, "train",
            {{"batch_size", {"train_batch_size"}}, {"global_batch_size"}, {"steps", {"max_train_steps"}},
             {"gradient_accumulation", {"gradient_accumulation_steps"}}, {"lr", {"learning_rate"}},
             {"optimizer"}, {"weight_decay", {"adam_weight_decay"}}, {"betas"}, {"eps", {"adam_epsilon"}},
             {"lr_scheduler"}, {"warmup", {"lr_warmup_steps", "warmup_steps"}}, {"max_grad_norm"},
             {"gradient_checkpointing"}, {"mixed_precision", {"dtype"}}, {"seed"}, {"noise_scheduler"},
             {"prediction_type", {"prediction"}},
             {"timestep_sampling", {"timestep_type", "weighting_scheme"}}, {"logit_mean"}, {"logit_std"},
             {"mode_scale"}, {"timestep_shift", {"training_shift"}},
             {"caption_dropout", {"caption_dropout_rate"}}, {"min_snr_gamma", {"snr_gamma"}},
             {"noise_offset"}, {"max_nonfinite_steps"}, {"log_every"}, {"blocks_to_swap"}, {"max_memory"},
             {"reg_ratio"}, {"prior_loss_weight", {"reg_weight"}}},
            {"skip_first_sample", "disable_sampling", "cache_text_embeddings"},
            {{"loss_type", "wick's loss is always the mean squared error", scalar_in({"mse"})},
             {"ema_config", "wick keeps no EMA of the weights", flag_off("use_ema")},
             {"optimizer_params", "wick's optimizer takes only train.lr, betas, eps and weight_decay", is_empty()},
             {"content_or_style", "wick draws timesteps by train.timestep_sampling alone", scalar_in({"balanced"})},
             {"linear_timesteps", "wick draws timesteps by train.timestep_sampling alone", is_false()},
             {"train_unet", "wick always trains the denoiser", scalar_in({"true", "yes", "on", "1"})},
             {"train_text_encoder", "wick never trains the text encoder (captions are cached embeddings)", is_false()}});
  const bool has_batch_size = s.get_int("batch_size", t.batch_size, Range::above(0));
  if (s.get_int("global_batch_size", t.global_batch_size, Range::above(0)) && has_batch_size)
    ctx.warn_key("train.batch_size", "train.batch_size is ignored: train.global_batch_size (" +
                                         std::to_string(t.global_batch_size) +
                                         ") sets the samples per micro-step over all ranks");
  s.get_int("steps", t.steps, Range::above(0));
  s.get_int("gradient_accumulation", t.gradient_accumulation, Range::above(0));
  s.get_float("lr", t.lr, Range::above(0));
  s.get_choice("optimizer", t.optimizer, optimizer_choices);
  s.get_float("weight_decay", t.weight_decay, Range::at_least(0));
  if (s.get_float_list("betas", t.betas, Range::between(0, 1, true)) && t.betas.size() != 2)
    ctx.fail(s.value("betas"), "train.betas must be a list of two numbers [beta1, beta2], got " +
                                   std::to_string(t.betas.size()));
  s.get_float("eps", t.eps, Range::above(0));
  s.get_choice("lr_scheduler", t.lr_scheduler, lr_schedule_names());
  s.get_int("warmup", t.warmup, Range::at_least(0));
  s.get_float("max_grad_norm", t.max_grad_norm, Range::at_least(0));
  if (s.has("gradient_checkpointing") && s.value("gradient_checkpointing").IsScalar() &&
      lowercase(s.value("gradient_checkpointing").Scalar()) == "auto") {
    std::string ignored_text;
    s.get_string("gradient_checkpointing", ignored_text);  // marks the key as set
    t.gradient_checkpointing = false;
    t.gradient_checkpointing_auto = true;
  } else if (s.get_bool("gradient_checkpointing", t.gradient_checkpointing)) {
    t.gradient_checkpointing_auto = false;
  }
  if (s.has("blocks_to_swap") && s.value("blocks_to_swap").IsScalar() &&
      lowercase(s.value("blocks_to_swap").Scalar()) == "auto") {
    std::string ignored_text;
    s.get_string("blocks_to_swap", ignored_text);
    t.blocks_to_swap = -1;
  } else {
    s.get_int("blocks_to_swap", t.blocks_to_swap, Range::at_least(0));
  }
  if (s.has("max_memory")) {
    std::string text;
    s.get_string("max_memory", text);
    std::optional<int64_t> bytes = parse_byte_size(text);
    if (!bytes)
      ctx.fail(s.value("max_memory"), "train.max_memory: '" + text +
                                          "' is not a size; write e.g. 24GB, 24GiB, 800MB or a byte count (0 = the "
                                          "device's memory)");
    t.max_memory = *bytes;
  }
  s.get_enum("mixed_precision", t.mixed_precision, precision_table);
  s.get_int("seed", t.seed, Range::at_least(0));
  s.get_enum("noise_scheduler", t.noise_scheduler, scheduler_table);
  s.get_enum("prediction_type", t.prediction_type, prediction_table);
  s.get_enum("timestep_sampling", t.timestep_sampling, timestep_table);
  s.get_float("logit_mean", t.logit_mean);
  s.get_float("logit_std", t.logit_std, Range::above(0));
  // The mode density's map u -> σ is monotone (σ stays in [0, 1]) for s in [-1, 2 / (π - 2)].
  s.get_float("mode_scale", t.mode_scale, Range::between(-1.0, 2.0 / (3.14159265358979 - 2.0)));
  s.get_float("timestep_shift", t.timestep_shift, Range::above(0));
  s.get_float("caption_dropout", t.caption_dropout, Range::between(0, 1));
  s.get_float("min_snr_gamma", t.min_snr_gamma, Range::at_least(0));
  s.get_float("noise_offset", t.noise_offset, Range::at_least(0));
  s.get_int("max_nonfinite_steps", t.max_nonfinite_steps, Range::above(0));
  s.get_int("log_every", t.log_every, Range::above(0));
  s.get_float("reg_ratio", t.reg_ratio, Range{.lo = 0, .lo_open = true, .hi = 1, .hi_open = true});
  s.get_float("prior_loss_weight", t.prior_loss_weight, Range::at_least(0));
}

void parse_datasets(ConfigContext& ctx, const YAML::Node& node, std::vector<DatasetConfig>& out) {
  if (!node.IsSequence()) ctx.fail(node, "'datasets' must be a list of dataset mappings (or use 'dataset:' for one)");
  std::vector<DatasetConfig> parsed(node.size());
  for (size_t i = 0; i < node.size(); ++i)
    parse_dataset(ctx, node[i], "datasets[" + std::to_string(i) + "]", parsed[i]);
  out = std::move(parsed);
}

void parse_save(ConfigContext& ctx, const YAML::Node& node, SaveConfig& v) {
  Section s(ctx, node, "save",
            {{"every", {"save_every"}}, {"keep_last", {"max_step_saves_to_keep"}}, {"dtype"},
             {"format", {"lora_format"}}},
            {"push_to_hub", "hf_repo_id", "hf_private", "save_format"});
  s.get_int("every", v.every, Range::at_least(0));
  s.get_int("keep_last", v.keep_last, Range::at_least(0));
  s.get_dtype("dtype", v.dtype);
  s.get_enum("format", v.format, lora_format_table);
}

void parse_sample(ConfigContext& ctx, const YAML::Node& node, SampleConfig& v) {
  Section s(ctx, node, "sample",
            {{"every", {"sample_every"}}, {"prompts"}, {"negative_prompt", {"neg"}}, {"steps", {"sample_steps"}},
             {"guidance", {"guidance_scale", "cfg_scale"}}, {"seed"}, {"n_per_class"}, {"sampler"}, {"width"},
             {"height"}},
            {"walk_seed", "network_multiplier"});
  s.get_int("every", v.every, Range::at_least(0));
  s.get_string_list("prompts", v.prompts);
  s.get_string("negative_prompt", v.negative_prompt);
  s.get_int("steps", v.steps, Range::above(0));
  s.get_float("guidance", v.guidance, Range::at_least(0));
  s.get_int("seed", v.seed, Range::at_least(0));
  s.get_int("n_per_class", v.n_per_class, Range::at_least(0));
  s.get_enum("sampler", v.sampler, sampler_table);
  s.get_int("width", v.width, Range::at_least(0));
  s.get_int("height", v.height, Range::at_least(0));
}

void parse_distributed(ConfigContext& ctx, const YAML::Node& node, DistributedConfig& v) {
  Section s(ctx, node, "distributed", {{"backend"}, {"shard"}, {"shard_optimizer"}, {"shard_group"}, {"bucket_mb"},
                                                {"timeout_s"}});
  s.get_enum("backend", v.backend, backend_table);
  // shard: none | optimizer (ZeRO-1) | weights (ZeRO-3 for the blocks' frozen weights) | auto (the memory plan
  // picks optimizer or weights); shard_optimizer: the older boolean (true = optimizer, false = none).
  if (s.has("shard")) {
    std::string text;
    s.get_string("shard", text);
    text = lowercase(text);
    v.shard_auto = false;
    if (text == "none") {
      v.shard_optimizer = false, v.shard_weights = false;
    } else if (text == "optimizer") {
      v.shard_optimizer = true, v.shard_weights = false;
    } else if (text == "weights") {
      v.shard_optimizer = true, v.shard_weights = true;
    } else if (text == "auto") {
      v.shard_optimizer = true, v.shard_weights = false, v.shard_auto = true;
    } else if (text == "gradients") {
      ctx.fail(s.value("shard"), "distributed.shard: gradients (ZeRO-2) is not available yet; use optimizer (ZeRO-1: "
                                 "the gradients are already reduce-scattered into the optimizer's shards) or weights");
    } else {
      ctx.fail(s.value("shard"),
               "distributed.shard: '" + text + "' is not a shard level; valid: none, optimizer, weights, auto");
    }
    bool legacy = v.shard_optimizer;
    if (s.get_bool("shard_optimizer", legacy) && legacy != v.shard_optimizer)
      ctx.fail(s.value("shard_optimizer"), "distributed.shard_optimizer: " + std::string(legacy ? "true" : "false") +
                                               " contradicts distributed.shard: " + text);
  } else {
    s.get_bool("shard_optimizer", v.shard_optimizer);
  }
  // shard_group: world (the weights' shards over every rank) | node (over the ranks of each node, every node
  // holding the whole: gathers never leave a node).
  if (s.has("shard_group")) {
    std::string text;
    s.get_string("shard_group", text);
    text = lowercase(text);
    if (text != "world" && text != "node")
      ctx.fail(s.value("shard_group"), "distributed.shard_group: '" + text + "' is not a group; valid: world, node");
    v.shard_within_node = text == "node";
  }
  s.get_int("bucket_mb", v.bucket_mb, Range::above(0));
  s.get_int("timeout_s", v.timeout_s, Range::above(0));
}

bool valid_device(const std::string& device) {
  if (device == "auto" || device == "cpu" || device == "cuda") return true;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5) return false;
  for (size_t i = 5; i < device.size(); ++i)
    if (device[i] < '0' || device[i] > '9') return false;
  return device.size() <= 9;
}

}  // namespace

namespace config_detail {

void parse_dataset(ConfigContext& ctx, const YAML::Node& node, const std::string& path, DatasetConfig& d) {
  if (node.IsDefined() && !node.IsNull()) ctx.set_at[path] = ctx.where(node);
  Section s(ctx, node, path,
            {{"path", {"folder_path", "dataset_path", "file"}}, {"include_labels"}, {"exclude_labels"},
             {"caption_dropout", {"caption_dropout_rate"}}, {"weight"}, {"latent_sampling"}, {"is_reg"}},
            {"caption_ext", "cache_latents_to_disk", "cache_latents", "resolution", "keep_tokens"},
            {{"num_repeats", "wick shows every sample once per epoch", number_is(1)},
             {"random_flip", "wick does not flip the cached latents", is_false()},
             {"flip_x", "wick does not flip the cached latents", is_false()},
             {"flip_y", "wick does not flip the cached latents", is_false()},
             {"shuffle_tokens", "the captions are cached embeddings, their tokens are not shuffled", is_false()},
             {"token_dropout_rate", "the captions are cached embeddings, no token is dropped", number_is(0)}});
  s.get_string("path", d.path);
  s.get_int_list("include_labels", d.include_labels, Range::at_least(0));
  s.get_int_list("exclude_labels", d.exclude_labels, Range::at_least(0));
  s.get_float("caption_dropout", d.caption_dropout, Range::between(0, 1));
  s.get_float("weight", d.weight, Range::above(0));
  s.get_enum("latent_sampling", d.latent_sampling, latent_sampling_table);
  s.get_bool("is_reg", d.is_reg);
}

// The top level (wick's shape, or the body of ai-toolkit's first process entry). `wrapper_name` is
// ai-toolkit's `config.name` when unwrapping.
void parse_top(ConfigContext& ctx, const YAML::Node& node, TrainConfig& c, const YAML::Node& wrapper_name) {
  Section s(ctx, node, "",
            {{"name"}, {"output_dir", {"training_folder"}}, {"device"}, {"trigger_word"}, {"model"}, {"network"},
             {"train"}, {"dataset"}, {"datasets"}, {"save"}, {"sample"}, {"distributed"}},
            {"job", "meta", "type", "performance_log_every", "sqlite_db_path", "logging"});
  if (wrapper_name.IsDefined() && !wrapper_name.IsNull()) {
    if (s.has("name")) ctx.fail(s.value("name"), "'name' given both in config: and in its process entry");
    if (!wrapper_name.IsScalar()) ctx.fail(wrapper_name, "name must be a string");
    c.name = wrapper_name.Scalar();
    ctx.set_at["name"] = ctx.where(wrapper_name);
  }
  s.get_string("name", c.name);
  s.get_string("output_dir", c.output_dir);
  if (s.get_string("device", c.device) && !valid_device(c.device))
    ctx.fail(s.value("device"), "device: unknown value '" + c.device + "'; valid values: auto, cpu, cuda, cuda:N");
  s.get_string("trigger_word", c.trigger_word);
  if (s.has("model")) parse_model(ctx, s.value("model"), c.model);
  if (s.has("network")) parse_network(ctx, s.value("network"), c.network);
  if (s.has("train")) parse_train(ctx, s.value("train"), c.train);
  if (s.has("dataset") && s.has("datasets"))
    ctx.fail(s.value("datasets"), "'dataset' and 'datasets' are both given; use 'dataset' for one dataset or "
                                  "'datasets' for a list, not both");
  if (s.has("dataset")) {
    DatasetConfig d;
    parse_dataset(ctx, s.value("dataset"), "dataset", d);
    c.datasets = {d};
  }
  if (s.has("datasets")) parse_datasets(ctx, s.value("datasets"), c.datasets);
  if (s.has("save")) parse_save(ctx, s.value("save"), c.save);
  if (s.has("sample")) parse_sample(ctx, s.value("sample"), c.sample);
  if (s.has("distributed")) parse_distributed(ctx, s.value("distributed"), c.distributed);
}

}  // namespace config_detail

const char* network_type_name(NetworkType value) { return name_in(network_table, value); }
const char* mixed_precision_name(MixedPrecision value) { return name_in(precision_table, value); }
const char* noise_scheduler_name(NoiseScheduler value) { return name_in(scheduler_table, value); }
const char* prediction_type_name(PredictionType value) { return name_in(prediction_table, value); }
const char* timestep_sampling_name(TimestepSampling value) { return name_in(timestep_table, value); }
const char* sampler_name(SamplerKind value) { return name_in(sampler_table, value); }
const char* comm_backend_name(CommBackend value) { return name_in(backend_table, value); }
const char* lora_format_name(LoraFormat value) { return name_in(lora_format_table, value); }
const char* latent_sampling_name(LatentSampling value) { return name_in(latent_sampling_table, value); }
const char* quantize_mode_name(QuantizeMode value) { return name_in(quantize_table, value); }
const char* quantize_scale_name(QuantizeScale value) { return name_in(quantize_scale_table, value); }

const ArchSchema* ConfigSchema::find(const std::string& name) const {
  const std::string wanted = lowercase(name);
  for (const ArchSchema& arch : archs) {
    if (lowercase(arch.name) == wanted) return &arch;
    for (const std::string& alias : arch.aliases)
      if (lowercase(alias) == wanted) return &arch;
  }
  return nullptr;
}

std::string ConfigSchema::names() const {
  std::vector<std::string> list;
  for (const ArchSchema& arch : archs) list.push_back(arch.name);
  return config_detail::join(list);
}

}  // namespace wick
