// training_state.json: writing and reading TrainingState with nlohmann::json.
#include "engine/checkpoint/training_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <type_traits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/atomic_file.h"
#include "runtime/error.h"

namespace wick {
namespace {

constexpr const char* kFormat = "wick.training_state";
constexpr int kVersion = 2;  // 2: typed loop counters (1 kept them as strings in "extra")

template <typename T>
T field(const nlohmann::json& json, const char* key, const std::string& path) {
  auto found = json.find(key);
  if (found == json.end()) WICK_FAIL(Data, path, ": missing field \"", key, "\"");
  try {
    return found->get<T>();
  } catch (const nlohmann::json::exception& e) {
    WICK_FAIL(Data, path, ": field \"", key, "\" has the wrong type (", found->type_name(), ")");
  }
}

}  // namespace

bool TrainingState::operator==(const TrainingState& other) const {
  return step == other.step && epoch == other.epoch && sample_cursor == other.sample_cursor && seed == other.seed &&
         rng.stream.key == other.rng.stream.key && rng.stream.stream == other.rng.stream.stream &&
         rng.offset == other.rng.offset && global_batch == other.global_batch && reg_batch == other.reg_batch &&
         skipped_steps == other.skipped_steps && nonfinite_in_a_row == other.nonfinite_in_a_row &&
         loss_scale == other.loss_scale;
}

FileDigest save_training_state(const std::string& path, const TrainingState& state) {
  nlohmann::json json = {
      {"format", kFormat},
      {"format_version", kVersion},
      {"step", state.step},
      {"epoch", state.epoch},
      {"sample_cursor", state.sample_cursor},
      {"seed", state.seed},
      {"rng", {{"key", state.rng.stream.key}, {"stream", state.rng.stream.stream}, {"offset", state.rng.offset}}},
      {"global_batch", state.global_batch},
      {"skipped_steps", state.skipped_steps},
      {"nonfinite_in_a_row", state.nonfinite_in_a_row},
  };
  if (state.reg_batch > 0) json["reg_batch"] = state.reg_batch;  // only with regularization data
  if (state.loss_scale)
    json["loss_scale"] = {{"scale", state.loss_scale->scale},
                          {"growth_tracker", state.loss_scale->growth_tracker},
                          {"n_skipped", state.loss_scale->n_skipped}};
  const std::string text = json.dump(2) + "\n";
  write_file_atomically(path, text);
  return {text.size(), sha256_hex(text.data(), text.size())};
}

TrainingState load_training_state(const std::string& path) {
  std::ifstream in(path);
  if (!in) WICK_FAIL(Data, "cannot open training state ", path, ": ", std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return training_state_from_json(text.str(), path);
}

TrainingState training_state_from_json(const std::string& text, const std::string& path) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    WICK_FAIL(Data, path, ": not valid JSON (", e.what(), ")");
  }
  if (!json.is_object()) WICK_FAIL(Data, path, ": expected a JSON object");
  std::string format = field<std::string>(json, "format", path);
  if (format != kFormat) WICK_FAIL(Data, path, ": format is \"", format, "\", expected \"", kFormat, "\"");
  int version = field<int>(json, "format_version", path);
  if (version > kVersion)
    WICK_FAIL(Data, path, ": format_version ", version, " is newer than this wick reads (", kVersion, ")");
  TrainingState state;
  state.step = field<int64_t>(json, "step", path);
  state.epoch = field<int64_t>(json, "epoch", path);
  state.sample_cursor = field<int64_t>(json, "sample_cursor", path);
  state.seed = field<uint64_t>(json, "seed", path);
  nlohmann::json rng = field<nlohmann::json>(json, "rng", path);
  const std::string rng_path = path + " (rng)";
  state.rng.stream.key = field<uint64_t>(rng, "key", rng_path);
  state.rng.stream.stream = field<uint64_t>(rng, "stream", rng_path);
  state.rng.offset = field<uint64_t>(rng, "offset", rng_path);
  if (version >= 2) {
    state.global_batch = field<int64_t>(json, "global_batch", path);
    state.skipped_steps = field<int64_t>(json, "skipped_steps", path);
    state.nonfinite_in_a_row = field<int64_t>(json, "nonfinite_in_a_row", path);
    if (json.contains("reg_batch")) state.reg_batch = field<int64_t>(json, "reg_batch", path);
    if (json.contains("loss_scale")) {
      nlohmann::json scale = field<nlohmann::json>(json, "loss_scale", path);
      const std::string scale_path = path + " (loss_scale)";
      state.loss_scale = TrainingState::LossScale{field<double>(scale, "scale", scale_path),
                                                  field<int64_t>(scale, "growth_tracker", scale_path),
                                                  field<int64_t>(scale, "n_skipped", scale_path)};
    }
    return state;
  }
  // Version 1 kept the loop's counters as strings under "extra".
  if (json.contains("extra")) {
    auto extra = field<std::map<std::string, std::string>>(json, "extra", path);
    auto number = [&](const char* key, auto fallback) -> decltype(fallback) {
      auto it = extra.find(key);
      if (it == extra.end()) return fallback;
      try {
        if constexpr (std::is_same_v<decltype(fallback), double>) return std::stod(it->second);
        else return std::stoll(it->second);
      } catch (const std::exception&) {
        WICK_FAIL(Data, path, ": extra.", key, " is not a number: '", it->second, "'");
      }
    };
    state.global_batch = number("global_batch", int64_t{0});
    state.skipped_steps = number("skipped_steps", int64_t{0});
    state.nonfinite_in_a_row = number("nonfinite_in_a_row", int64_t{0});
    if (extra.count("loss_scale"))
      state.loss_scale = TrainingState::LossScale{number("loss_scale", 0.0), number("loss_scale_tracker", int64_t{0}),
                                                  number("loss_scale_skipped", int64_t{0})};
  }
  return state;
}

}  // namespace wick
