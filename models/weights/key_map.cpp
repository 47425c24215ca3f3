#include "models/weights/key_map.h"

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>

#include "engine/autograd/node.h"
#include "runtime/ops/float8.h"

namespace wick {
namespace {

// At most this many names of each kind of problem go into an error message.
constexpr size_t kListedProblems = 10;

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

std::string shape_text(const Shape& shape) {
  std::ostringstream out;
  out << shape;
  return out.str();
}

std::string with_suffix(const std::string& name, const std::string& suffix) {
  return suffix.empty() ? name : name + "." + suffix;
}

// The tensor rules one table rule stands for, with `{N}` = `block` (when block >= 0).
void expand_into(const KeyRule& rule, int64_t block, std::vector<KeyRule>& out) {
  auto resolve = [&](const std::string& name) {
    return block < 0 ? name : replace_all(name, "{N}", std::to_string(block));
  };
  const std::vector<std::string> suffixes = rule.suffixes.empty() ? std::vector<std::string>{""} : rule.suffixes;
  for (const std::string& suffix : suffixes) {
    KeyRule flat{.kind = rule.kind,
                 .target = with_suffix(resolve(rule.target), suffix),
                 .sources = {},
                 .suffixes = {},
                 .part = rule.part,
                 .n_parts = rule.n_parts,
                 .rank = rule.rank};
    for (const std::string& source : rule.sources) flat.sources.push_back(with_suffix(resolve(source), suffix));
    out.push_back(std::move(flat));
  }
}

// How one target tensor is made from the source, checked against the headers.
struct Plan {
  KeyRuleKind kind = KeyRuleKind::Rename;
  std::vector<std::string> sources;  // full source names (prefix included)
  int64_t part = 0, n_parts = 1;     // SplitRows
  int64_t rank = 0;                  // Reshape
  Shape shape;
  std::optional<DType> dtype;  // the first source's DType (U8 for F8_E4M3 codes)
  bool float8 = false;         // the sources are F8_E4M3: U8 codes, decoded into a floating slot
  std::vector<std::string> copies;  // FirstOf: tied copies of sources[0] the source also holds (not read)
  std::string incomplete;      // a source tensor the rule needs and the source lacks
  std::string invalid;         // why the sources do not combine
};

struct SourcePlan {
  std::map<std::string, Plan> targets;  // target name -> plan
  std::vector<std::string> names;       // full source names inside the prefix, ignored names left out
  int64_t n_outside_prefix = 0;
  int64_t n_ignored = 0;
};

// "to_q.weight [32, 32] + to_k.weight [32, 32]"
std::string describe_sources(const WeightSource& source, const Plan& plan) {
  std::ostringstream out;
  for (size_t i = 0; i < plan.sources.size(); ++i) {
    if (i > 0) out << (plan.kind == KeyRuleKind::ConcatRows ? " + " : ", ");
    out << plan.sources[i];
    if (source.contains(plan.sources[i])) out << " " << source.info(plan.sources[i]).shape;
  }
  if (plan.kind == KeyRuleKind::SwapHalves) out << ", halves swapped";
  if (plan.kind == KeyRuleKind::Transpose) out << ", transposed";
  if (plan.kind == KeyRuleKind::SplitRows) out << ", row block " << plan.part + 1 << " of " << plan.n_parts;
  if (plan.kind == KeyRuleKind::Reshape) out << ", reshaped to " << plan.rank << " axes";
  return out.str();
}

Plan plan_rule(const WeightSource& source, const std::string& prefix, const KeyRule& rule) {
  Plan plan{.kind = rule.kind,
            .sources = {},
            .part = rule.part,
            .n_parts = rule.n_parts,
            .rank = rule.rank,
            .shape = {},
            .dtype = std::nullopt,
            .copies = {},
            .incomplete = {},
            .invalid = {}};
  for (const std::string& name : rule.sources) plan.sources.push_back(prefix + name);
  if (rule.kind == KeyRuleKind::FirstOf) {  // a rename of the first name present; the others are copies
    std::vector<std::string> present;
    for (const std::string& name : plan.sources)
      if (source.contains(name)) present.push_back(name);
    if (present.empty()) {
      plan.incomplete = plan.sources.at(0);
      return plan;
    }
    plan.kind = KeyRuleKind::Rename;
    plan.sources = {present[0]};
    plan.copies.assign(present.begin() + 1, present.end());
    for (const std::string& copy : plan.copies)
      if (source.info(copy).shape != source.info(present[0]).shape) {
        plan.invalid = present[0] + " " + shape_text(source.info(present[0]).shape) + " and its tied copy " + copy +
                       " " + shape_text(source.info(copy).shape) + " differ in shape";
        return plan;
      }
  }
  for (const std::string& name : plan.sources)
    if (!source.contains(name)) {
      plan.incomplete = name;
      return plan;
    }
  const SafetensorsInfo& first = source.info(plan.sources[0]);
  plan.float8 = first.dtype == "F8_E4M3";
  for (const std::string& name : plan.sources) {
    const SafetensorsInfo& info = source.info(name);
    if (!info.wick_dtype && info.dtype != "F8_E4M3") {
      plan.invalid = name + " is " + info.dtype + ", which wick cannot load into a parameter";
      return plan;
    }
    if ((info.dtype == "F8_E4M3") != plan.float8) {
      plan.invalid = "cannot combine " + describe_sources(source, plan) + ": some are F8_E4M3, some not";
      return plan;
    }
  }
  plan.dtype = plan.float8 ? DType::U8 : *first.wick_dtype;
  plan.shape = first.shape;
  WICK_CHECK(rule.kind == KeyRuleKind::ConcatRows || plan.sources.size() == 1, "key map: the rule for '", rule.target,
             "' takes one source, not ", plan.sources.size());
  if (rule.kind == KeyRuleKind::SwapHalves) {
    if (plan.shape.empty() || plan.shape[0] % 2 != 0)
      plan.invalid = "rows of " + plan.sources[0] + " " + shape_text(plan.shape) + " do not split into two halves";
  } else if (rule.kind == KeyRuleKind::SplitRows) {
    WICK_CHECK(rule.n_parts > 0 && rule.part >= 0 && rule.part < rule.n_parts, "key map: the rule for '", rule.target,
               "' takes row block ", rule.part, " of ", rule.n_parts);
    if (plan.shape.empty() || plan.shape[0] % rule.n_parts != 0)
      plan.invalid = "rows of " + plan.sources[0] + " " + shape_text(plan.shape) + " do not split into " +
                     std::to_string(rule.n_parts) + " equal blocks";
    else
      plan.shape[0] /= rule.n_parts;
  } else if (rule.kind == KeyRuleKind::Transpose) {
    if (plan.shape.size() != 2)
      plan.invalid = plan.sources[0] + " " + shape_text(plan.shape) + " is not 2-d and cannot be transposed";
    else
      std::swap(plan.shape[0], plan.shape[1]);
  } else if (rule.kind == KeyRuleKind::Reshape) {
    WICK_CHECK(rule.rank > 0, "key map: the rule for '", rule.target, "' reshapes to ", rule.rank, " axes");
    Shape shape = plan.shape;
    while (static_cast<int64_t>(shape.size()) < rule.rank) shape.push_back(1);
    while (static_cast<int64_t>(shape.size()) > rule.rank && shape.back() == 1) shape.pop_back();
    if (static_cast<int64_t>(shape.size()) != rule.rank)
      plan.invalid = plan.sources[0] + " " + shape_text(plan.shape) + " cannot become " + std::to_string(rule.rank) +
                     " axes by adding or dropping trailing axes of extent 1";
    else
      plan.shape = shape;
  } else if (rule.kind == KeyRuleKind::ConcatRows) {
    if (plan.shape.empty()) plan.invalid = plan.sources[0] + " is a scalar and has no rows to concatenate";
    for (size_t i = 1; i < plan.sources.size() && plan.invalid.empty(); ++i) {
      const Shape& part = source.info(plan.sources[i]).shape;
      if (part.size() != plan.shape.size() || !std::equal(part.begin() + 1, part.end(), plan.shape.begin() + 1)) {
        plan.invalid = "cannot concatenate the rows of " + describe_sources(source, plan);
        break;
      }
      plan.shape[0] += part[0];
    }
  }
  return plan;
}

SourcePlan plan_source(const WeightSource& source, const DetectedFormat& format) {
  SourcePlan out;
  const std::set<std::string> ignored(format.format.ignored.begin(), format.format.ignored.end());
  for (const std::string& name : source.names()) {
    if (name.rfind(format.prefix, 0) != 0)
      ++out.n_outside_prefix;
    else if (ignored.count(name.substr(format.prefix.size())))
      ++out.n_ignored;
    else
      out.names.push_back(name);
  }
  std::set<std::string> referenced;  // full source names some rule in use reads
  for (const KeyRule& rule : expand_rules(source, format)) {
    bool any_present = std::any_of(rule.sources.begin(), rule.sources.end(),
                                   [&](const std::string& s) { return source.contains(format.prefix + s); });
    if (!any_present) continue;
    WICK_CHECK(out.targets.count(rule.target) == 0, "key map: format '", format.format.name, "' has two rules for '",
               rule.target, "' that both apply to ", source.path());
    for (const std::string& s : rule.sources) referenced.insert(format.prefix + s);
    out.targets[rule.target] = plan_rule(source, format.prefix, rule);
  }
  for (const std::string& name : out.names) {
    std::string target = name.substr(format.prefix.size());
    if (referenced.count(name) || out.targets.count(target)) continue;
    out.targets[target] = plan_rule(source, format.prefix, rename(target, target));
  }
  return out;
}

// "; first: a, b, c (and 12 more)"
void append_list(std::ostringstream& out, const char* label, const std::vector<std::string>& items) {
  if (items.empty()) return;
  out << "\n  " << label << " (" << items.size() << "):";
  for (size_t i = 0; i < std::min(items.size(), kListedProblems); ++i) out << "\n    " << items[i];
  if (items.size() > kListedProblems) out << "\n    ... and " << items.size() - kListedProblems << " more";
}

std::string format_label(const DetectedFormat& format) {
  return "format '" + format.format.name + "'" + (format.prefix.empty() ? "" : " (prefix '" + format.prefix + "')");
}

bool inside_mapping(const Tensor& tensor, const SafetensorsFile& file) {
  const auto* data = static_cast<const uint8_t*>(tensor.data());
  return data >= file.mapped_data() && data < file.mapped_data() + file.mapped_bytes();
}

// A source tensor as the plan reads it: F8_E4M3 bytes ([*shape, 1] U8) as their codes of `shape`,
// or decoded to f32 (scale 1) for a floating slot.
Tensor source_tensor(const WeightSource& source, const std::string& name, bool float8, bool decode) {
  Tensor t = source.get(name);
  if (!float8) return t;
  const Shape& shape = source.info(name).shape;
  t = t.reshape(shape);
  if (!decode) return t;
  const int64_t cols = shape.empty() ? 1 : shape.back();
  return dequantize_float8(t.reshape({numel(shape) / std::max<int64_t>(cols, 1), cols}), Tensor(), DType::F32)
      .reshape(shape);
}

// The plan's tensor in `dtype` on `device`, built in one pass (each source piece copied and cast
// into its rows of the result).
Tensor materialize(const WeightSource& source, const Plan& plan, DType dtype, Device device) {
  Tensor out = Tensor::empty(plan.shape, dtype, device);
  const bool decode = plan.float8 && dtype != DType::U8;
  auto get = [&](const std::string& name) { return source_tensor(source, name, plan.float8, decode); };
  if (plan.kind == KeyRuleKind::Rename) {
    out.copy_from(get(plan.sources[0]));
  } else if (plan.kind == KeyRuleKind::SwapHalves) {
    Tensor in = get(plan.sources[0]);
    const int64_t half = plan.shape[0] / 2;
    out.narrow(0, 0, half).copy_from(in.narrow(0, half, half));
    out.narrow(0, half, half).copy_from(in.narrow(0, 0, half));
  } else if (plan.kind == KeyRuleKind::SplitRows) {
    out.copy_from(get(plan.sources[0]).narrow(0, plan.part * plan.shape[0], plan.shape[0]));
  } else if (plan.kind == KeyRuleKind::Transpose) {
    out.copy_from(get(plan.sources[0]).transpose(0, 1));
  } else if (plan.kind == KeyRuleKind::Reshape) {
    out.copy_from(get(plan.sources[0]).reshape(plan.shape));
  } else {
    int64_t row = 0;
    for (const std::string& name : plan.sources) {
      Tensor in = get(name);
      out.narrow(0, row, in.size(0)).copy_from(in);
      row += in.size(0);
    }
  }
  return out;
}

}  // namespace

KeyRule rename(std::string target, std::string source) {
  return {.kind = KeyRuleKind::Rename, .target = std::move(target), .sources = {std::move(source)}, .suffixes = {}};
}
KeyRule concat_rows(std::string target, std::vector<std::string> sources) {
  return {.kind = KeyRuleKind::ConcatRows, .target = std::move(target), .sources = std::move(sources), .suffixes = {}};
}
KeyRule swap_halves(std::string target, std::string source) {
  return {.kind = KeyRuleKind::SwapHalves, .target = std::move(target), .sources = {std::move(source)}, .suffixes = {}};
}
KeyRule first_of(std::string target, std::vector<std::string> sources) {
  return {.kind = KeyRuleKind::FirstOf, .target = std::move(target), .sources = std::move(sources), .suffixes = {}};
}
KeyRule split_rows(std::string target, std::string source, int64_t part, int64_t n_parts) {
  return {.kind = KeyRuleKind::SplitRows,
          .target = std::move(target),
          .sources = {std::move(source)},
          .suffixes = {},
          .part = part,
          .n_parts = n_parts};
}
KeyRule transposed(std::string target, std::string source) {
  return {.kind = KeyRuleKind::Transpose, .target = std::move(target), .sources = {std::move(source)}, .suffixes = {}};
}
KeyRule reshaped(std::string target, std::string source, int64_t rank) {
  KeyRule rule{
      .kind = KeyRuleKind::Reshape, .target = std::move(target), .sources = {std::move(source)}, .suffixes = {}};
  rule.rank = rank;
  return rule;
}
KeyRule rename_layer(std::string target_module, std::string source_module) {
  KeyRule rule = rename(std::move(target_module), std::move(source_module));
  rule.suffixes = {"weight", "bias"};
  return rule;
}
KeyRule concat_layer(std::string target_module, std::vector<std::string> source_modules) {
  KeyRule rule = concat_rows(std::move(target_module), std::move(source_modules));
  rule.suffixes = {"weight", "bias"};
  return rule;
}
KeyRule swap_halves_layer(std::string target_module, std::string source_module) {
  KeyRule rule = swap_halves(std::move(target_module), std::move(source_module));
  rule.suffixes = {"weight", "bias"};
  return rule;
}

std::vector<KeyRule> layer_renames(const std::vector<std::pair<std::string, std::string>>& modules) {
  std::vector<KeyRule> out;
  for (const auto& [target, source] : modules) out.push_back(rename_layer(target, source));
  return out;
}

std::vector<std::string> prefixed(const std::string& prefix, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& name : names) out.push_back(prefix + name);
  return out;
}

int64_t count_blocks(const std::vector<std::string>& names, const std::string& prefix) {
  int64_t n = 0;
  for (const std::string& name : names) {
    if (name.rfind(prefix, 0) != 0) continue;
    size_t at = prefix.size(), end = at;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end == at || end >= name.size() || name[end] != '.' || end - at > 9) continue;
    n = std::max<int64_t>(n, std::stoll(name.substr(at, end - at)) + 1);
  }
  return n;
}

std::vector<KeyRule> expand_rules(const WeightSource& source, const DetectedFormat& format) {
  std::vector<std::string> names;
  for (const std::string& name : source.names())
    if (name.rfind(format.prefix, 0) == 0) names.push_back(name.substr(format.prefix.size()));
  std::vector<KeyRule> out;
  for (const KeyRule& rule : format.format.rules) expand_into(rule, -1, out);
  for (const BlockRules& table : format.format.blocks) {
    const int64_t n_blocks = count_blocks(names, table.count_prefix);
    for (int64_t block = 0; block < n_blocks; ++block)
      for (const KeyRule& rule : table.rules) expand_into(rule, block, out);
  }
  return out;
}

DetectedFormat detect_format(const WeightSource& source, const std::vector<WeightFormat>& formats) {
  for (const WeightFormat& format : formats)
    for (const std::string& prefix : format.prefixes) {
      bool all = !format.detect_keys.empty();
      for (const std::string& key : format.detect_keys) all = all && source.contains(prefix + key);
      if (all) return {.format = format, .prefix = prefix};
    }
  std::ostringstream out;
  out << "weights: " << source.path() << " is in none of the known formats:";
  for (const WeightFormat& format : formats) {
    out << "\n  '" << format.name << "' looks for";
    for (const std::string& key : format.detect_keys) out << " '" << key << "'";
    out << " under the prefixes";
    for (const std::string& prefix : format.prefixes) out << " '" << prefix << "'";
  }
  out << "\n  the source's first names:";
  for (size_t i = 0; i < std::min<size_t>(5, source.names().size()); ++i) out << " " << source.names()[i];
  WICK_FAIL(Data, out.str());
}

std::map<std::string, Shape> mapped_shapes(const WeightSource& source, const DetectedFormat& format) {
  SourcePlan plan = plan_source(source, format);
  std::vector<std::string> problems;
  std::map<std::string, Shape> shapes;
  for (const auto& [target, p] : plan.targets) {
    if (!p.incomplete.empty())
      problems.push_back(target + ": needs " + p.incomplete + ", which the source lacks");
    else if (!p.invalid.empty())
      problems.push_back(target + ": " + p.invalid);
    else
      shapes[target] = p.shape;
  }
  if (!problems.empty()) {
    std::ostringstream out;
    out << "weights: " << source.path() << " read as " << format_label(format) << ": " << problems.size()
        << " model tensors cannot be made from the source";
    append_list(out, "problems", problems);
    WICK_FAIL(Data, out.str());
  }
  return shapes;
}

LoadMappedReport load_mapped(Module& module, const WeightSource& source, const DetectedFormat& format,
                             const LoadMappedOptions& options) {
  SourcePlan plan = plan_source(source, format);
  std::vector<std::pair<std::string, Tensor*>> slots = parameter_slots(module);
  std::vector<std::string> missing, mismatched, unused;
  std::vector<std::pair<std::pair<std::string, Tensor*>, const Plan*>> jobs;
  std::set<std::string> used;
  const std::set<std::string> prefilled(options.prefilled.begin(), options.prefilled.end());
  for (const auto& [name, slot] : slots) {
    auto it = plan.targets.find(name);
    if (it == plan.targets.end()) {
      if (!prefilled.count(name) || !slot->defined()) missing.push_back(name);
      continue;
    }
    const Plan& p = it->second;
    for (const std::string& s : p.sources) used.insert(s);
    for (const std::string& s : p.copies) used.insert(s);
    if (!p.incomplete.empty()) {
      missing.push_back(name + " (needs " + p.incomplete + ", which the source lacks)");
    } else if (!p.invalid.empty()) {
      mismatched.push_back(name + ": " + p.invalid);
    } else if (p.float8 && slot->defined() && slot->dtype() == DType::U8 && p.kind != KeyRuleKind::Rename &&
               p.kind != KeyRuleKind::Reshape) {
      mismatched.push_back(name + ": float8 codes (" + describe_sources(source, p) +
                           ") load only under their own name or a rename (their scales would not follow)");
    } else if (slot->defined() && slot->dtype() == DType::U8 && !p.float8 && *p.dtype != DType::U8) {
      mismatched.push_back(name + ": the model holds float8 codes here, the source has " +
                           source.info(p.sources[0]).dtype + " (" + describe_sources(source, p) + ")");
    } else if (slot->defined() && slot->shape() != p.shape) {
      mismatched.push_back(name + ": the model expects " + shape_text(slot->shape()) + ", the source has " +
                           shape_text(p.shape) + " (" + describe_sources(source, p) + ")");
    } else {
      jobs.push_back({{name, slot}, &p});
    }
  }
  for (const std::string& name : plan.names)
    if (!used.count(name)) unused.push_back(name);
  if (!missing.empty() || !unused.empty() || !mismatched.empty()) {
    std::ostringstream out;
    out << "weights: " << source.path() << " read as " << format_label(format) << " does not fit the model ("
        << module.type_name() << ", " << slots.size() << " parameters; " << plan.names.size()
        << " source tensors): " << missing.size() << " parameters missing, " << unused.size()
        << " source tensors unused, " << mismatched.size() << " shape mismatches";
    append_list(out, "missing from the source", missing);
    append_list(out, "unused source tensors", unused);
    append_list(out, "shape mismatches", mismatched);
    WICK_FAIL(Data, out.str());
  }

  LoadMappedReport report;
  report.n_outside_prefix = plan.n_outside_prefix;
  report.n_ignored = plan.n_ignored;
  for (const auto& [slot_entry, p] : jobs) {
    const auto& [name, slot] = slot_entry;
    const DType dtype = slot->defined() ? slot->dtype() : *p->dtype;
    const Device device = slot->defined() ? slot->device() : Device::cpu();
    Tensor loaded;
    const bool view =
        p->kind == KeyRuleKind::Rename || p->kind == KeyRuleKind::SplitRows || p->kind == KeyRuleKind::Reshape;
    if (view && *p->dtype == dtype && device.is_cpu()) {
      loaded = source_tensor(source, p->sources[0], p->float8, /*decode=*/false);
      if (p->kind == KeyRuleKind::SplitRows) loaded = loaded.narrow(0, p->part * p->shape[0], p->shape[0]);
      if (p->kind == KeyRuleKind::Reshape) loaded = loaded.reshape(p->shape);  // a view: the source is contiguous
      if (inside_mapping(loaded, source.file_of(p->sources[0])))
        ++report.n_zero_copy;
      else
        ++report.n_materialized;  // unaligned data: SafetensorsFile::get copied it
    } else {
      loaded = materialize(source, *p, dtype, device);
      ++report.n_materialized;
    }
    *slot = loaded;
    if (options.trainable) autograd::set_requires_grad(*slot, true, name);
    ++report.n_loaded;
  }
  return report;
}

}  // namespace wick
