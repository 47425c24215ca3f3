// Internal to engine/config: reading one YAML mapping of the config with every key checked.
//
//   ConfigContext ctx{.source = "cfg.yaml"};
//   Section train(ctx, node, "train", {{"steps"}, {"lr", {"learning_rate"}}}, {"train_unet"});
//   train.get_int("steps", config.train.steps, Range::above(0));
//   train.get_float("lr", config.train.lr, Range::above(0));
//
// Section's constructor rejects unknown keys (naming the nearest valid one), a key given together
// with one of its aliases, and a non-mapping node; it notes accepted keys wick ignores and warns
// about ignored ai-toolkit options whose value would change training there. Getters leave the
// output untouched when the key is absent or its value is empty (`key:` with nothing after it), and
// record where it was set.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/model_options.h"
#include "engine/config/train_config.h"
#include "runtime/dtype.h"

namespace wick::config_detail {

struct ConfigContext {
  std::string source;                       // file name (or "<string>")
  const ConfigSchema* schema = nullptr;     // the registered architectures (never null while parsing)
  std::string override_arg;                 // non-empty while applying one --set argument
  std::vector<std::string>* notes = nullptr;
  std::vector<std::string>* warnings = nullptr;
  std::map<std::string, std::string> set_at;  // canonical key path -> where it was last set

  // "<source>:<line>:<column>" (1-based) or "--set <argument>".
  std::string where(const YAML::Node& at) const;
  [[noreturn]] void fail(const YAML::Node& at, const std::string& message) const;
  // "<where the key was set>: " or "<source>: " when it kept its default.
  [[noreturn]] void fail_key(const std::string& key_path, const std::string& message) const;
  // Appends "<where the key was set>: <message>" to `warnings` (when given).
  void warn_key(const std::string& key_path, const std::string& message) const;
};

struct KeyDef {
  std::string name;
  std::vector<std::string> aliases = {};
};

// An ai-toolkit option that changes training there and that wick does not honour. A value for which
// `same_as_wick` holds (or an empty one) asks for what wick does anyway and is only noted; any other
// value gets a warning: "'<path>' (<value>) is ignored by wick but changes training in ai-toolkit:
// <wick_does>".
struct UnhonouredKey {
  std::string name;
  std::string wick_does;
  std::function<bool(const YAML::Node&)> same_as_wick;
};
// Predicates for UnhonouredKey::same_as_wick: a scalar equal (case-insensitively) to one of `values`;
// a boolean false; a number equal to `value`; an empty mapping (or list); a mapping whose `key` is
// absent or false.
std::function<bool(const YAML::Node&)> scalar_in(std::vector<std::string> values);
std::function<bool(const YAML::Node&)> is_false();
std::function<bool(const YAML::Node&)> number_is(double value);
std::function<bool(const YAML::Node&)> is_empty();
std::function<bool(const YAML::Node&)> flag_off(std::string key);

using Range = ConfigRange;

// Name/value pairs: canonical spellings first (listed in errors), then accepted aliases.
template <typename E>
struct EnumTable {
  std::vector<std::pair<std::string, E>> canonical;
  std::vector<std::pair<std::string, E>> aliases = {};
};

class Section {
 public:
  // `path` is the dotted key path of this mapping ("" for the top level, "train", "datasets[1]").
  // `ignored` keys are accepted (ai-toolkit options with no meaning in wick) and noted; `unhonoured`
  // keys are accepted too, with a warning when their value would change training in ai-toolkit.
  Section(ConfigContext& ctx, const YAML::Node& node, std::string path, std::vector<KeyDef> keys,
          std::vector<std::string> ignored = {}, const std::vector<UnhonouredKey>& unhonoured = {});

  // The value node of key `name` (or of one of its aliases); an undefined node when absent.
  YAML::Node value(const std::string& name) const;
  bool has(const std::string& name) const { return value(name).IsDefined(); }
  // The key node's location of `name` (for errors about the key itself).
  std::string key_path(const std::string& name) const;
  const YAML::Node& node() const { return node_; }
  ConfigContext& ctx() const { return ctx_; }

  bool get_int(const std::string& name, int64_t& out, Range range = Range::any());
  bool get_float(const std::string& name, double& out, Range range = Range::any());
  bool get_bool(const std::string& name, bool& out);
  bool get_string(const std::string& name, std::string& out);
  bool get_string_list(const std::string& name, std::vector<std::string>& out);
  bool get_int_list(const std::string& name, std::vector<int64_t>& out, Range range = Range::any());
  bool get_float_list(const std::string& name, std::vector<double>& out, Range range = Range::any());
  bool get_dtype(const std::string& name, DType& out);
  // A string that must be one of `valid` (exact, lowercase).
  bool get_choice(const std::string& name, std::string& out, const std::vector<std::string>& valid);
  template <typename E>
  bool get_enum(const std::string& name, E& out, const EnumTable<E>& table);

 private:
  // The value node when present and not null; marks the key as set.
  bool present(const std::string& name, YAML::Node& value);
  std::string scalar_of(const std::string& name, const YAML::Node& value, const char* what) const;
  int64_t to_int(const std::string& name, const YAML::Node& value, Range range) const;
  double to_float(const std::string& name, const YAML::Node& value, Range range) const;
  std::string enum_value(const std::string& name, const YAML::Node& value,
                         const std::vector<std::string>& spellings, const std::vector<std::string>& listed) const;

  ConfigContext& ctx_;
  YAML::Node node_;
  std::string path_;
  std::vector<KeyDef> keys_;
  std::map<std::string, YAML::Node> values_;  // canonical name -> value node
};

// Levenshtein distance, for "did you mean".
int64_t edit_distance(const std::string& a, const std::string& b);
std::string join(const std::vector<std::string>& items, const char* separator = ", ");

template <typename E>
bool Section::get_enum(const std::string& name, E& out, const EnumTable<E>& table) {
  YAML::Node value;
  if (!present(name, value)) return false;
  std::vector<std::string> spellings, listed;
  for (const auto& [spelling, v] : table.canonical) spellings.push_back(spelling), listed.push_back(spelling);
  for (const auto& [spelling, v] : table.aliases) spellings.push_back(spelling);
  std::string chosen = enum_value(name, value, spellings, listed);
  for (const auto& [spelling, v] : table.canonical)
    if (spelling == chosen) out = v;
  for (const auto& [spelling, v] : table.aliases)
    if (spelling == chosen) out = v;
  return true;
}

}  // namespace wick::config_detail
