// The `model:` keys an architecture owns, declared as data: the config parser checks them (type,
// range, file:line:column in errors) without knowing any architecture, and the architecture reads
// the checked, typed values back.
//
//   std::vector<OptionKey> keys = {
//       {.name = "hidden_size", .type = OptionType::Int, .default_value = int64_t{128}, .range = ConfigRange::above(0),
//        .help = "transformer width"}};
//   ModelOptions options = ModelOptions::defaults(keys);     // every key, in declaration order
//   int64_t hidden = options.get_int("hidden_size");          // 128, or what the config set
//
// Values keep the order of the declaration, so the resolved YAML lists them the same way every time.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace wick {

// An inclusive or exclusive bound on a number; describe() reads "> 0", ">= 0", "in [0, 1)".
struct ConfigRange {
  double lo = -std::numeric_limits<double>::infinity();
  bool lo_open = false;
  double hi = std::numeric_limits<double>::infinity();
  bool hi_open = false;
  static ConfigRange any() { return {}; }
  static ConfigRange above(double lo) { return {lo, true}; }
  static ConfigRange at_least(double lo) { return {lo, false}; }
  static ConfigRange between(double lo, double hi, bool hi_open = false) { return {lo, false, hi, hi_open}; }
  bool contains(double v) const;
  std::string describe() const;
};

enum class OptionType { Bool, Int, Float, String, IntList, FloatList, StringList };

using OptionValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                                 std::vector<std::string>>;

// One `model.<name>` key of an architecture. default_value must hold the alternative `type` names;
// `choices` (String only) lists the accepted values, empty = any string.
struct OptionKey {
  std::string name;
  std::vector<std::string> aliases = {};
  OptionType type = OptionType::Int;
  OptionValue default_value = int64_t{0};
  ConfigRange range = {};
  std::vector<std::string> choices = {};
  std::string help = {};
};

// `text` (a command line's value) as `key`'s type, checked against its range and choices: booleans true / false (1 / 0,
// yes / no, on / off), integers and numbers in full, strings as they are; lists take comma-separated items. WickError
// (Config) "<where>: ..." for a value that does not parse or fit.
OptionValue parse_option_text(const OptionKey& key, const std::string& text, const std::string& where);

class ModelOptions {
 public:
  // Every key at its default, in declaration order.
  static ModelOptions defaults(const std::vector<OptionKey>& keys);

  bool has(const std::string& name) const;
  // The value of `name`; a missing key or another type is a WickError (Usage) naming the key: the
  // architecture asked for a key it did not declare.
  bool get_bool(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  const std::vector<int64_t>& get_int_list(const std::string& name) const;
  const std::vector<double>& get_float_list(const std::string& name) const;
  const std::vector<std::string>& get_string_list(const std::string& name) const;
  const OptionValue& get(const std::string& name) const;

  // Replaces the value of a declared key (the parser, after checking it).
  void set(const std::string& name, OptionValue value);
  const std::vector<std::pair<std::string, OptionValue>>& values() const { return values_; }
  bool operator==(const ModelOptions&) const = default;

 private:
  std::vector<std::pair<std::string, OptionValue>> values_;
};

}  // namespace wick
