#include "engine/config/config_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "runtime/error.h"

namespace wick::config_detail {

std::string ConfigContext::where(const YAML::Node& at) const {
  if (!override_arg.empty()) return "--set " + override_arg;
  YAML::Mark mark = at.IsDefined() ? at.Mark() : YAML::Mark::null_mark();
  if (mark.is_null()) return source;
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

void ConfigContext::fail(const YAML::Node& at, const std::string& message) const {
  throw WickError(ErrorKind::Config, where(at) + ": " + message);
}

void ConfigContext::fail_key(const std::string& key_path, const std::string& message) const {
  auto found = set_at.find(key_path);
  throw WickError(ErrorKind::Config, (found != set_at.end() ? found->second : source) + ": " + message);
}

void ConfigContext::warn_key(const std::string& key_path, const std::string& message) const {
  if (!warnings) return;
  auto found = set_at.find(key_path);
  warnings->push_back((found != set_at.end() ? found->second : source) + ": " + message);
}

namespace {

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

std::function<bool(const YAML::Node&)> scalar_in(std::vector<std::string> values) {
  return [values = std::move(values)](const YAML::Node& node) {
    return node.IsScalar() && std::find(values.begin(), values.end(), lowercase(node.Scalar())) != values.end();
  };
}

std::function<bool(const YAML::Node&)> is_false() { return scalar_in({"false", "no", "off", "0"}); }

std::function<bool(const YAML::Node&)> number_is(double value) {
  return [value](const YAML::Node& node) {
    if (!node.IsScalar()) return false;
    const std::string& text = node.Scalar();
    char* end = nullptr;
    double parsed = std::strtod(text.c_str(), &end);
    return end != text.c_str() && *end == '\0' && parsed == value;
  };
}

std::function<bool(const YAML::Node&)> is_empty() {
  return [](const YAML::Node& node) { return (node.IsMap() || node.IsSequence()) && node.size() == 0; };
}

std::function<bool(const YAML::Node&)> flag_off(std::string key) {
  return [key = std::move(key)](const YAML::Node& node) {
    if (!node.IsMap()) return false;
    YAML::Node flag = node[key];
    return !flag.IsDefined() || flag.IsNull() || is_false()(flag);
  };
}

int64_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<int64_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = int64_t(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int64_t diagonal = row[0];
    row[0] = int64_t(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int64_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

namespace {

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

const char* node_kind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "nothing";
    default: return "a scalar";
  }
}

}  // namespace

Section::Section(ConfigContext& ctx, const YAML::Node& node, std::string path, std::vector<KeyDef> keys,
                 std::vector<std::string> ignored, const std::vector<UnhonouredKey>& unhonoured)
    : ctx_(ctx), node_(node), path_(std::move(path)), keys_(std::move(keys)) {
  if (!node_.IsDefined() || node_.IsNull()) return;
  if (!node_.IsMap())
    ctx_.fail(node_, (path_.empty() ? std::string("the config") : "'" + path_ + "'") + " must be a mapping of keys, got " +
                         node_kind(node_));
  std::map<std::string, std::string> seen_as;  // canonical -> spelling used
  for (const auto& entry : node_) {  // entry: a (key node, value node) pair held by value
    const YAML::Node key_node = entry.first;
    if (!key_node.IsScalar()) ctx_.fail(key_node, "keys under '" + path_ + "' must be plain names");
    const std::string key = key_node.Scalar();
    const KeyDef* match = nullptr;
    for (const KeyDef& def : keys_) {
      if (def.name == key || std::find(def.aliases.begin(), def.aliases.end(), key) != def.aliases.end()) {
        match = &def;
        break;
      }
    }
    if (match) {
      auto [previous, fresh] = seen_as.emplace(match->name, key);
      if (!fresh)
        ctx_.fail(key_node, "'" + child_path(path_, key) + "' given twice (as '" + previous->second + "' and '" +
                                key + "', which " + (previous->second == key ? "is the same key" : "are aliases") + ")");
      values_[match->name] = entry.second;
      continue;
    }
    auto unhonoured_key = std::find_if(unhonoured.begin(), unhonoured.end(),
                                       [&](const UnhonouredKey& u) { return u.name == key; });
    const YAML::Node value = entry.second;
    if (unhonoured_key != unhonoured.end() && !value.IsNull() && !unhonoured_key->same_as_wick(value)) {
      if (ctx_.warnings)
        ctx_.warnings->push_back(ctx_.where(key_node) + ": '" + child_path(path_, key) + "'" +
                                 (value.IsScalar() ? " (" + value.Scalar() + ")" : std::string()) +
                                 " is ignored by wick but changes training in ai-toolkit: " + unhonoured_key->wick_does);
      continue;
    }
    if (unhonoured_key != unhonoured.end() || std::find(ignored.begin(), ignored.end(), key) != ignored.end()) {
      if (ctx_.notes)
        ctx_.notes->push_back(ctx_.where(key_node) + ": '" + child_path(path_, key) +
                              "' is accepted for compatibility and ignored by wick");
      continue;
    }
    // Unknown: name the nearest valid key (aliases included) when it is close, else list them.
    std::string best, best_canonical;
    int64_t best_distance = std::numeric_limits<int64_t>::max();
    std::vector<std::string> listed;
    for (const KeyDef& def : keys_) {
      listed.push_back(def.name);
      std::vector<std::string> spellings = {def.name};
      spellings.insert(spellings.end(), def.aliases.begin(), def.aliases.end());
      for (const std::string& spelling : spellings) {
        int64_t d = edit_distance(key, spelling);
        if (d < best_distance) best_distance = d, best = spelling, best_canonical = def.name;
      }
    }
    std::string message = "unknown key '" + child_path(path_, key) + "'";
    int64_t close_enough = std::max<int64_t>(2, int64_t(key.size() + 1) / 2);
    if (!best.empty() && best_distance <= close_enough) {
      message += "; did you mean '" + best + "'";
      if (best != best_canonical) message += " (alias of '" + best_canonical + "')";
      message += "?";
    } else {
      message += "; valid keys" + (path_.empty() ? std::string() : " under '" + path_ + "'") + ": " + join(listed);
    }
    ctx_.fail(key_node, message);
  }
}

YAML::Node Section::value(const std::string& name) const {
  auto found = values_.find(name);
  return found == values_.end() ? YAML::Node(YAML::NodeType::Undefined) : found->second;
}

std::string Section::key_path(const std::string& name) const { return child_path(path_, name); }

bool Section::present(const std::string& name, YAML::Node& value_out) {
  YAML::Node v = value(name);
  if (!v.IsDefined() || v.IsNull()) return false;
  value_out = v;
  ctx_.set_at[key_path(name)] = ctx_.where(v);
  return true;
}

std::string Section::scalar_of(const std::string& name, const YAML::Node& value, const char* what) const {
  if (!value.IsScalar())
    ctx_.fail(value, key_path(name) + " must be " + what + ", got " + node_kind(value));
  return value.Scalar();
}

int64_t Section::to_int(const std::string& name, const YAML::Node& value, Range range) const {
  std::string text = scalar_of(name, value, "an integer");
  int64_t v = 0;
  const char* begin = text.data() + (text.size() > 1 && text[0] == '+' ? 1 : 0);
  auto [end, ec] = std::from_chars(begin, text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    // Accept integral floats written in exponent form ("1e3"), as YAML users do for step counts.
    char* float_end = nullptr;
    double d = std::strtod(text.c_str(), &float_end);
    bool integral = !text.empty() && float_end == text.c_str() + text.size() && std::isfinite(d) &&
                    d == std::floor(d) && std::fabs(d) < 9.0e15;
    if (!integral) ctx_.fail(value, key_path(name) + " must be an integer, got '" + text + "'");
    v = int64_t(d);
  }
  if (!range.contains(double(v)))
    ctx_.fail(value, key_path(name) + " must be " + range.describe() + ", got " + text);
  return v;
}

double Section::to_float(const std::string& name, const YAML::Node& value, Range range) const {
  std::string text = scalar_of(name, value, "a number");
  double v = 0;
  const char* begin = text.data() + (text.size() > 1 && text[0] == '+' ? 1 : 0);
  auto [end, ec] = std::from_chars(begin, text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
    ctx_.fail(value, key_path(name) + " must be a number, got '" + text + "'");
  if (!range.contains(v)) ctx_.fail(value, key_path(name) + " must be " + range.describe() + ", got " + text);
  return v;
}

bool Section::get_int(const std::string& name, int64_t& out, Range range) {
  YAML::Node v;
  if (!present(name, v)) return false;
  out = to_int(name, v, range);
  return true;
}

bool Section::get_float(const std::string& name, double& out, Range range) {
  YAML::Node v;
  if (!present(name, v)) return false;
  out = to_float(name, v, range);
  return true;
}

bool Section::get_bool(const std::string& name, bool& out) {
  YAML::Node v;
  if (!present(name, v)) return false;
  std::string text = scalar_of(name, v, "true or false");
  std::string lower = text;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "true" || lower == "yes" || lower == "on") out = true;
  else if (lower == "false" || lower == "no" || lower == "off") out = false;
  else ctx_.fail(v, key_path(name) + " must be true or false, got '" + text + "'");
  return true;
}

bool Section::get_string(const std::string& name, std::string& out) {
  YAML::Node v;
  if (!present(name, v)) return false;
  out = scalar_of(name, v, "a string");
  return true;
}

bool Section::get_string_list(const std::string& name, std::vector<std::string>& out) {
  YAML::Node v;
  if (!present(name, v)) return false;
  std::vector<std::string> items;
  if (v.IsScalar()) {
    items.push_back(v.Scalar());  // a single string stands for a one-element list
  } else if (v.IsSequence()) {
    for (const YAML::Node& item : v) {
      if (!item.IsScalar())
        ctx_.fail(item, key_path(name) + " must be a list of strings, got " + node_kind(item) + " in it");
      items.push_back(item.Scalar());
    }
  } else {
    ctx_.fail(v, key_path(name) + " must be a list of strings, got " + node_kind(v));
  }
  out = std::move(items);
  return true;
}

bool Section::get_int_list(const std::string& name, std::vector<int64_t>& out, Range range) {
  YAML::Node v;
  if (!present(name, v)) return false;
  std::vector<int64_t> items;
  if (v.IsScalar()) items.push_back(to_int(name, v, range));
  else if (v.IsSequence())
    for (const YAML::Node& item : v) items.push_back(to_int(name, item, range));
  else ctx_.fail(v, key_path(name) + " must be a list of integers, got " + node_kind(v));
  out = std::move(items);
  return true;
}

bool Section::get_float_list(const std::string& name, std::vector<double>& out, Range range) {
  YAML::Node v;
  if (!present(name, v)) return false;
  std::vector<double> items;
  if (v.IsScalar()) items.push_back(to_float(name, v, range));
  else if (v.IsSequence())
    for (const YAML::Node& item : v) items.push_back(to_float(name, item, range));
  else ctx_.fail(v, key_path(name) + " must be a list of numbers, got " + node_kind(v));
  out = std::move(items);
  return true;
}

bool Section::get_dtype(const std::string& name, DType& out) {
  static const EnumTable<DType> table = {
      {{"f32", DType::F32}, {"bf16", DType::BF16}, {"f16", DType::F16}},
      {{"float32", DType::F32}, {"fp32", DType::F32}, {"float", DType::F32}, {"bfloat16", DType::BF16},
       {"fp16", DType::F16}, {"float16", DType::F16}, {"half", DType::F16}}};
  return get_enum(name, out, table);
}

bool Section::get_choice(const std::string& name, std::string& out, const std::vector<std::string>& valid) {
  YAML::Node v;
  if (!present(name, v)) return false;
  out = enum_value(name, v, valid, valid);
  return true;
}

std::string Section::enum_value(const std::string& name, const YAML::Node& value,
                                const std::vector<std::string>& spellings,
                                const std::vector<std::string>& listed) const {
  std::string text = scalar_of(name, value, "a name");
  std::string lower = text;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const std::string& spelling : spellings)
    if (spelling == lower) return spelling;
  ctx_.fail(value, key_path(name) + ": unknown value '" + text + "'; valid values: " + join(listed));
}

}  // namespace wick::config_detail
