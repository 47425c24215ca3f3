#include "engine/config/model_options.h"

#include <cmath>
#include <sstream>

#include "runtime/error.h"

namespace wick {
namespace {

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

template <typename T>
const T& typed(const ModelOptions& options, const std::string& name, const char* type) {
  const T* value = std::get_if<T>(&options.get(name));
  WICK_CHECK_KIND(Usage, value != nullptr, "model option '", name, "' is not a ", type);
  return *value;
}

std::vector<std::string> split_items(const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) items.push_back(item);
  return items;
}

int64_t parse_int(const std::string& text, const ConfigRange& range, const std::string& where) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  WICK_CHECK_KIND(Config, used > 0 && used == text.size(), where, ": '", text, "' is not an integer");
  WICK_CHECK_KIND(Config, range.contains(static_cast<double>(value)), where, ": ", value, " is not ",
                  range.describe());
  return value;
}

double parse_number(const std::string& text, const ConfigRange& range, const std::string& where) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  WICK_CHECK_KIND(Config, used > 0 && used == text.size(), where, ": '", text, "' is not a number");
  WICK_CHECK_KIND(Config, range.contains(value), where, ": ", text, " is not ", range.describe());
  return value;
}

std::string parse_string(const std::string& text, const std::vector<std::string>& choices, const std::string& where) {
  if (choices.empty()) return text;
  std::string names;
  for (const std::string& choice : choices) {
    if (choice == text) return text;
    names += (names.empty() ? "" : ", ") + choice;
  }
  WICK_FAIL(Config, where, ": '", text, "' is not one of ", names);
}

}  // namespace

OptionValue parse_option_text(const OptionKey& key, const std::string& text, const std::string& where) {
  switch (key.type) {
    case OptionType::Bool: {
      for (const char* yes : {"true", "1", "yes", "on"})
        if (text == yes) return true;
      for (const char* no : {"false", "0", "no", "off"})
        if (text == no) return false;
      WICK_FAIL(Config, where, ": '", text, "' is not true or false");
    }
    case OptionType::Int:
      return parse_int(text, key.range, where);
    case OptionType::Float:
      return parse_number(text, key.range, where);
    case OptionType::String:
      return parse_string(text, key.choices, where);
    case OptionType::IntList: {
      std::vector<int64_t> out;
      for (const std::string& item : split_items(text)) out.push_back(parse_int(item, key.range, where));
      return out;
    }
    case OptionType::FloatList: {
      std::vector<double> out;
      for (const std::string& item : split_items(text)) out.push_back(parse_number(item, key.range, where));
      return out;
    }
    case OptionType::StringList: {
      std::vector<std::string> out;
      for (const std::string& item : split_items(text)) out.push_back(parse_string(item, key.choices, where));
      return out;
    }
  }
  WICK_FAIL(Usage, where, ": unknown option type");
}

bool ConfigRange::contains(double v) const {
  if (std::isnan(v)) return false;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  if (hi_open ? !(v < hi) : !(v <= hi)) return false;
  return true;
}

std::string ConfigRange::describe() const {
  bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi)
    return std::string("in ") + (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) +
           (hi_open ? ")" : "]");
  if (has_lo) return (lo_open ? "> " : ">= ") + number_text(lo);
  if (has_hi) return (hi_open ? "< " : "<= ") + number_text(hi);
  return "a number";
}

ModelOptions ModelOptions::defaults(const std::vector<OptionKey>& keys) {
  ModelOptions options;
  for (const OptionKey& key : keys) options.values_.emplace_back(key.name, key.default_value);
  return options;
}

bool ModelOptions::has(const std::string& name) const {
  for (const auto& [key, value] : values_)
    if (key == name) return true;
  return false;
}

const OptionValue& ModelOptions::get(const std::string& name) const {
  for (const auto& [key, value] : values_)
    if (key == name) return value;
  WICK_FAIL(Usage, "model option '", name, "' is not declared by the architecture");
}

void ModelOptions::set(const std::string& name, OptionValue value) {
  for (auto& [key, slot] : values_)
    if (key == name) {
      slot = std::move(value);
      return;
    }
  WICK_FAIL(Usage, "model option '", name, "' is not declared by the architecture");
}

bool ModelOptions::get_bool(const std::string& name) const { return typed<bool>(*this, name, "boolean"); }
int64_t ModelOptions::get_int(const std::string& name) const { return typed<int64_t>(*this, name, "integer"); }
double ModelOptions::get_float(const std::string& name) const { return typed<double>(*this, name, "number"); }
const std::string& ModelOptions::get_string(const std::string& name) const {
  return typed<std::string>(*this, name, "string");
}
const std::vector<int64_t>& ModelOptions::get_int_list(const std::string& name) const {
  return typed<std::vector<int64_t>>(*this, name, "list of integers");
}
const std::vector<double>& ModelOptions::get_float_list(const std::string& name) const {
  return typed<std::vector<double>>(*this, name, "list of numbers");
}
const std::vector<std::string>& ModelOptions::get_string_list(const std::string& name) const {
  return typed<std::vector<std::string>>(*this, name, "list of strings");
}

}  // namespace wick
