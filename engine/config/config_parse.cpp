// Parsing the training config: the entry points, ai-toolkit's `config: process:` wrapper, --set
// overrides, defaults that depend on other keys, and the checks that span several keys. The key
// tables of every section (with ai-toolkit / EriDiffusion aliases) are in config_sections.cpp.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/config/config_reader.h"
#include "engine/config/config_sections.h"
#include "engine/config/train_config.h"
#include "runtime/error.h"
#include "runtime/utf8.h"

namespace wick {

using config_detail::ConfigContext;
using config_detail::Section;
using config_detail::parse_dataset;
using config_detail::parse_top;

namespace {

// A regularization dataset (is_reg) goes beside one training dataset, in the same file (the batches
// of both are read from one file), with train.reg_ratio giving each batch at least one sample of each
// (each rank's batch, or with train.global_batch_size each global batch).
// reg_ratio and prior_loss_weight act only with one: set without it they are errors.
void check_regularization(const ConfigContext& ctx, TrainConfig& c) {
  size_t n_reg = 0, reg_index = 0;
  for (size_t i = 0; i < c.datasets.size(); ++i)
    if (c.datasets[i].is_reg) ++n_reg, reg_index = i;
  if (n_reg == 0) {
    for (const char* key : {"train.reg_ratio", "train.prior_loss_weight"})
      if (ctx.set_at.count(key))
        ctx.fail_key(key, std::string(key) + " is set but no dataset is marked is_reg: true (regularization data); "
                                             "remove it or add the regularization dataset");
    return;
  }
  const std::string at = "datasets[" + std::to_string(reg_index) + "]";
  if (n_reg > 1) ctx.fail_key(at, "more than one dataset is marked is_reg: true; wick mixes one regularization set");
  if (c.datasets.size() != 2)
    ctx.fail_key(at, "a regularization dataset (is_reg: true) needs exactly one training dataset beside it, got " +
                         std::to_string(c.datasets.size() - 1));
  const DatasetConfig& train = c.datasets[1 - reg_index];
  const DatasetConfig& reg = c.datasets[reg_index];
  if (reg.path != train.path)
    ctx.fail_key(at + ".path", "the regularization dataset " + reg.path + " is not the training dataset's file " +
                                   train.path + "; wick reads both from one file: pack them into one and select "
                                   "each with include_labels / exclude_labels");
  if (reg.caption_dropout != train.caption_dropout || reg.latent_sampling != train.latent_sampling)
    ctx.fail_key(at, "the regularization dataset's caption_dropout and latent_sampling must be the training "
                     "dataset's (one batch holds both; set them on both entries or in train.caption_dropout)");
  for (const DatasetConfig* d : {&train, &reg})
    if (d->weight != 1.0)
      ctx.fail_key("datasets[" + std::to_string(d - c.datasets.data()) + "].weight",
                   "with a regularization dataset, train.reg_ratio sets the mix; remove the dataset weight");
  const int64_t n_reg_per_batch = reg_per_batch(c);
  const bool global = c.train.global_batch_size > 0;
  const int64_t batch = global ? c.train.global_batch_size : c.train.batch_size;
  const char* batch_key = global ? "train.global_batch_size" : "train.batch_size";
  if (n_reg_per_batch < 1 || n_reg_per_batch > batch - 1) {
    std::ostringstream message;
    message << "train.reg_ratio " << c.train.reg_ratio << " of " << batch_key << " " << batch << " gives "
            << n_reg_per_batch << " regularization samples per " << (global ? "global " : "") << "batch; each "
            << (global ? "global " : "") << "batch needs at least one training and one regularization sample ("
            << (global ? "global_batch_size" : "batch_size")
            << " >= 2, ratio between 1/" << (global ? "global_batch_size" : "batch_size") << " and 1 - 1/"
            << (global ? "global_batch_size" : "batch_size") << ")";
    ctx.fail_key("train.reg_ratio", message.str());
  }
  if (reg_index == 0) std::swap(c.datasets[0], c.datasets[1]);  // the training dataset first
}

// ai-toolkit / EriDiffusion: `job: ..., config: {name: ..., process: [{type: ..., <wick keys>}]}, meta: ...`.
void parse_root(ConfigContext& ctx, const YAML::Node& root, TrainConfig& c) {
  if (!root.IsDefined() || root.IsNull()) throw WickError(ErrorKind::Config, ctx.source + ": the config is empty");
  if (!root.IsMap()) ctx.fail(root, "the config must be a mapping of keys");
  if (!root["config"].IsDefined()) {
    parse_top(ctx, root, c, YAML::Node(YAML::NodeType::Undefined));
    return;
  }
  Section outer(ctx, root, "", {{"config"}}, {"job", "meta"});
  YAML::Node config = outer.value("config");
  Section wrapper(ctx, config, "config", {{"name"}, {"process"}});
  YAML::Node process = wrapper.value("process");
  if (!process.IsDefined() || !process.IsSequence() || process.size() == 0)
    ctx.fail(process.IsDefined() ? process : config, "config.process must be a list with one process entry");
  if (process.size() > 1)
    ctx.fail(process[1], "config.process has " + std::to_string(process.size()) +
                             " entries; wick runs one process per config (split them into several files)");
  parse_top(ctx, process[0], c, wrapper.value("name"));
}

// Configs must be UTF-8 (runtime/utf8.h): yaml-cpp reads other bytes as they are but writes them back escaped, so a
// config holding them would not survive to_yaml (nor config_hash).
void check_utf8(const std::string& text, const std::string& where) {
  const size_t at = invalid_utf8_at(text);
  if (at == std::string::npos) return;
  const size_t line_start = at == 0 ? std::string::npos : text.rfind('\n', at - 1);
  const size_t line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
  const size_t column = at - (line_start == std::string::npos ? 0 : line_start + 1) + 1;
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(text[at]));
  throw WickError(ErrorKind::Config, where + ":" + std::to_string(line) + ":" + std::to_string(column) +
                                         ": not valid UTF-8 (byte " + byte + "); a config is UTF-8 text");
}

// One --set argument, "key.path=value": the value is parsed as YAML and applied like the file's keys.
void apply_override(ConfigContext& ctx, const std::string& argument, TrainConfig& c) {
  ctx.override_arg = argument;
  size_t equals = argument.find('=');
  if (equals == std::string::npos || equals == 0)
    throw WickError(ErrorKind::Config, "--set " + argument + ": expected key.path=value");
  std::string key = argument.substr(0, equals);
  check_utf8(argument, "--set " + key);
  YAML::Node value;
  try {
    value = YAML::Load(argument.substr(equals + 1));
  } catch (const YAML::Exception& e) {
    throw WickError(ErrorKind::Config, "--set " + argument + ": the value is not valid YAML: " + e.msg);
  }
  std::vector<std::string> parts;
  std::stringstream stream(key);
  for (std::string part; std::getline(stream, part, '.');) {
    if (part.empty()) throw WickError(ErrorKind::Config, "--set " + argument + ": empty component in key '" + key + "'");
    parts.push_back(part);
  }
  auto nest = [&](size_t from) {
    YAML::Node inner = value;
    for (size_t i = parts.size(); i-- > from;) {
      YAML::Node outer(YAML::NodeType::Map);
      outer[parts[i]] = inner;
      inner = outer;
    }
    return inner;
  };
  // dataset.KEY addresses the first dataset; datasets.N.KEY the N-th (N may be one past the end).
  if ((parts[0] == "dataset" || parts[0] == "datasets") && parts.size() >= 2) {
    size_t index = 0, from = 1;
    if (parts[0] == "datasets") {
      const std::string& n = parts[1];
      if (n.find_first_not_of("0123456789") != std::string::npos || n.size() > 6)
        throw WickError(ErrorKind::Config, "--set " + argument + ": expected datasets.<index>.<key>");
      index = std::stoul(n);
      from = 2;
      if (index > c.datasets.size())
        throw WickError(ErrorKind::Config, "--set " + argument + ": datasets has " +
                                               std::to_string(c.datasets.size()) + " entries");
    }
    if (from == parts.size()) throw WickError(ErrorKind::Config, "--set " + argument + ": expected a key after the index");
    if (index == c.datasets.size()) c.datasets.emplace_back();
    parse_dataset(ctx, nest(from), parts[0] == "dataset" ? "dataset" : "datasets[" + std::to_string(index) + "]",
                  c.datasets[index]);
  } else {
    parse_top(ctx, nest(0), c, YAML::Node(YAML::NodeType::Undefined));
  }
  ctx.override_arg.clear();
}

// Defaults that depend on other keys, then checks that span several keys.
void resolve_and_check(ConfigContext& ctx, TrainConfig& c) {
  if (!ctx.set_at.count("network.linear_alpha")) c.network.linear_alpha = double(c.network.linear);
  if (!ctx.set_at.count("network.conv_alpha")) c.network.conv_alpha = double(c.network.conv);
  const ArchSchema* arch = ctx.schema->find(c.model.arch);
  WICK_CHECK(arch != nullptr, "config: model.arch '", c.model.arch, "' is not in the schema");
  if (!ctx.set_at.count("train.noise_scheduler")) c.train.noise_scheduler = arch->default_noise_scheduler;
  if (!ctx.set_at.count("sample.guidance") && arch->default_sample_guidance)
    c.sample.guidance = *arch->default_sample_guidance;
  // An architecture that samples at the dataset's latent size has no use for a chosen size (ai-toolkit's
  // configs always give one): noted like the other ignored keys, and reset so the resolved config says 0.
  for (auto [key, value] : {std::pair{"sample.width", &c.sample.width}, std::pair{"sample.height", &c.sample.height}})
    if (!arch->sample_size && *value != 0) {
      const std::string where = ctx.set_at.count(key) ? ctx.set_at.at(key) : ctx.source;
      if (ctx.notes)
        ctx.notes->push_back(where + ": '" + key + "' is accepted for compatibility and ignored by wick (model.arch " +
                             c.model.arch + " samples at the dataset's latent size)");
      *value = 0;
    }
  // The architecture's LoRA file format, for adapter runs (a full run writes the model in its own names and keeps the
  // neutral kohya, which names no LoRA format to refuse).
  if (!ctx.set_at.count("save.format") && c.network.type != NetworkType::Full)
    c.save.format = arch->default_lora_format;
  if (c.train.prediction_type == PredictionType::V && c.train.noise_scheduler != NoiseScheduler::Ddpm)
    ctx.fail_key("train.prediction_type", "train.prediction_type v_prediction is a DDPM target (noise_scheduler ddpm); "
                                          "a flowmatch model predicts its velocity ε − x0 already");
  if (c.network.conv > 0 && !(c.network.conv_alpha > 0))
    ctx.fail_key("network.conv_alpha", "network.conv_alpha must be > 0 with network.conv " +
                                           std::to_string(c.network.conv) +
                                           " (it scales the LoCon update by alpha / rank)");
  if (c.network.conv > 0 && c.network.type == NetworkType::Dora)
    ctx.fail_key("network.conv", "network.conv " + std::to_string(c.network.conv) +
                                     ": wick's DoRA wraps Linear layers only; LoCon needs network.type lora (set "
                                     "network.conv to 0 for DoRA)");
  if (c.network.conv > 0 && c.network.type == NetworkType::Full)
    ctx.fail_key("network.conv", "network.conv " + std::to_string(c.network.conv) +
                                     " sets the rank of convolution adapters, but network.type full trains every "
                                     "weight itself (no adapters)");
  if (c.sample.sampler == SamplerKind::Auto)
    c.sample.sampler = arch->default_sampler                                    ? *arch->default_sampler
                       : c.train.noise_scheduler == NoiseScheduler::FlowMatch ? SamplerKind::Euler
                                                                               : SamplerKind::Ddim;
  for (DatasetConfig& d : c.datasets)
    if (d.caption_dropout < 0) d.caption_dropout = c.train.caption_dropout;
  // ai-toolkit's `timestep_type: shift` draws σ uniformly and applies its scheduler's shift: 3.0 (SD3)
  // for its SD flow-matching config. Without train.timestep_shift, wick uses that value.
  if (c.train.timestep_sampling == TimestepSampling::Shift) {
    if (!ctx.set_at.count("train.timestep_shift")) {
      c.train.timestep_shift = kDefaultTimestepShift;
    } else if (c.train.timestep_shift == 1.0) {
      ctx.fail_key("train.timestep_shift",
                   "train.timestep_sampling shift with train.timestep_shift 1 is plain uniform sampling: use "
                   "timestep_sampling uniform, or a shift other than 1 (leave timestep_shift out for SD3's 3)");
    }
  }

  if (c.name.empty()) ctx.fail_key("name", "missing required key 'name' (the run directory is <output_dir>/<name>)");
  if (c.output_dir.empty()) ctx.fail_key("output_dir", "output_dir must not be empty");
  if (c.datasets.empty()) ctx.fail_key("dataset", "missing required key 'dataset' (or a 'datasets' list)");
  for (size_t i = 0; i < c.datasets.size(); ++i) {
    std::string at = ctx.set_at.count("dataset") ? "dataset" : "datasets[" + std::to_string(i) + "]";
    if (c.datasets[i].path.empty()) ctx.fail_key(at, "missing required key '" + at + ".path' (the cached-latent HDF5 file)");
  }
  if (arch->needs_base_weights && c.model.name_or_path.empty())
    ctx.fail_key("model.arch", "model.arch " + c.model.arch + " needs model.name_or_path (the base weights)");
  if (c.network.type != NetworkType::Full && c.model.name_or_path.empty())
    ctx.fail_key("network.type", std::string("network.type ") + network_type_name(c.network.type) +
                                     " trains an adapter on a base model: set model.name_or_path");
  if (arch->check)
    if (auto problem = arch->check(c.model.options)) ctx.fail_key("model." + problem->first, problem->second);
  if (c.sample.every > 0 && c.sample.prompts.empty() && c.sample.n_per_class == 0)
    ctx.fail_key("sample.every", "sample.every is " + std::to_string(c.sample.every) +
                                     " but there is nothing to sample: give sample.prompts or sample.n_per_class");
  if (c.distributed.backend == CommBackend::Nccl && c.device == "cpu")
    ctx.fail_key("distributed.backend", "distributed.backend nccl needs a CUDA device, but device is cpu");
  check_regularization(ctx, c);
  if (c.datasets.size() == 1 && c.datasets[0].weight != 1.0) {
    const std::string key = ctx.set_at.count("datasets[0].weight") ? "datasets[0].weight" : "dataset.weight";
    std::ostringstream weight;
    weight << c.datasets[0].weight;
    ctx.fail_key(key, key + " is " + weight.str() +
                          ", but the run has one dataset and a sampling weight among datasets has nothing to weigh "
                          "(remove it; wick trains on one dataset per run)");
  }

  if (!c.trigger_word.empty()) ctx.warn_key("trigger_word", trigger_word_warning(c.trigger_word));
}

TrainConfig parse_with(ConfigContext& ctx, const YAML::Node& root, const std::vector<std::string>& overrides) {
  TrainConfig config;
  const ArchSchema* fallback = ctx.schema->find(ctx.schema->default_arch);
  WICK_CHECK(fallback != nullptr, "config schema: the default arch '", ctx.schema->default_arch, "' is not registered");
  config.model.arch = fallback->name;
  config.model.options = ModelOptions::defaults(fallback->keys);
  parse_root(ctx, root, config);
  for (const std::string& argument : overrides) apply_override(ctx, argument, config);
  resolve_and_check(ctx, config);
  return config;
}

}  // namespace

int64_t reg_per_batch(const TrainConfig& config) {
  for (const DatasetConfig& d : config.datasets)
    if (d.is_reg) {
      const int64_t batch = config.train.global_batch_size > 0 ? config.train.global_batch_size : config.train.batch_size;
      return std::llround(config.train.reg_ratio * static_cast<double>(batch));
    }
  return 0;
}

std::optional<int64_t> parse_byte_size(const std::string& text) {
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t += char(std::tolower(static_cast<unsigned char>(c)));
  if (t.empty()) return std::nullopt;
  size_t digits = 0;
  while (digits < t.size() && (std::isdigit(static_cast<unsigned char>(t[digits])) || t[digits] == '.')) ++digits;
  if (digits == 0 || std::count(t.begin(), t.begin() + static_cast<ptrdiff_t>(digits), '.') > 1) return std::nullopt;
  const double value = std::stod(t.substr(0, digits));
  const std::string unit = t.substr(digits);
  const std::vector<std::pair<std::string, double>> units = {
      {"", 1.0},      {"b", 1.0},      {"kb", 1e3},     {"mb", 1e6},    {"gb", 1e9},
      {"tb", 1e12},   {"k", 1e3},      {"m", 1e6},      {"g", 1e9},     {"kib", 1024.0},
      {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  for (const auto& [name, factor] : units)
    if (unit == name) {
      const double bytes = value * factor;
      if (!(bytes >= 0.0 && bytes < 9.0e18)) return std::nullopt;
      return static_cast<int64_t>(bytes + 0.5);
    }
  return std::nullopt;
}

TrainConfig parse_config_string(const std::string& text, const std::string& source, const ConfigSchema& schema,
                                const std::vector<std::string>& overrides, std::vector<std::string>* notes,
                                std::vector<std::string>* warnings) {
  ConfigContext ctx{.source = source, .schema = &schema, .notes = notes, .warnings = warnings};
  check_utf8(text, source);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw WickError(ErrorKind::Config, source + ":" + std::to_string(e.mark.line + 1) + ":" +
                                           std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
  }
  return parse_with(ctx, root, overrides);
}

std::string trigger_word_warning(const std::string& trigger_word) {
  return "trigger_word '" + trigger_word +
         "' replaces [trigger] in the prompts wick encodes when it samples (sample.prompts, sample.negative_prompt, wick "
         "sample --prompt); the training captions were encoded when the dataset was packed, so training cannot put the "
         "word into them as ai-toolkit does: `wick dataset encode --config` with this file (or --trigger-word) puts it "
         "into the captions and the stored sample prompts";
}

TrainConfig parse_config_file(const std::string& path, const ConfigSchema& schema,
                              const std::vector<std::string>& overrides, std::vector<std::string>* notes,
                              std::vector<std::string>* warnings) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw WickError(ErrorKind::Config, path + ": cannot open the config file");
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) throw WickError(ErrorKind::Config, path + ": cannot read the config file");
  return parse_config_string(text.str(), path, schema, overrides, notes, warnings);
}

}  // namespace wick
