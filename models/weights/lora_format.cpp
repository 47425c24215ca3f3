#include "models/weights/lora_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
#include "runtime/safetensors.h"

namespace wick {
namespace {

constexpr size_t kListedKeys = 10;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_text(const Shape& shape) {
  std::ostringstream out;
  out << shape;
  return out.str();
}

// Keys nobody claimed: handed to the caller, or an error listing up to ten.
void report_unused(std::vector<std::string> keys, std::vector<std::string>* unused, const char* what) {
  if (unused != nullptr) {
    unused->insert(unused->end(), keys.begin(), keys.end());
    return;
  }
  if (keys.empty()) return;
  std::ostringstream out;
  out << what << ": " << keys.size() << " tensors belong to no module of the model:";
  for (size_t i = 0; i < std::min(keys.size(), kListedKeys); ++i) out << " " << keys[i];
  if (keys.size() > kListedKeys) out << " ... and " << keys.size() - kListedKeys << " more";
  WICK_FAIL(Data, out.str());
}

// `rows` with the first and second halves exchanged (a view when there is nothing to swap).
Tensor swap_row_halves(const Tensor& rows) {
  const int64_t n = rows.size(0);
  WICK_CHECK_KIND(Data, n % 2 == 0, "LoRA: cannot swap the halves of ", n, " rows");
  return concat({rows.narrow(0, n / 2, n / 2), rows.narrow(0, 0, n / 2)}, 0);
}

// scale · x, computed in f32 and stored in x's dtype; x itself when scale is 1.
Tensor scaled(const Tensor& x, double scale) {
  if (scale == 1.0) return x;
  return mul(x.to(DType::F32), scale).to(x.dtype());
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  return std::memcmp(x.data(), y.data(), x.nbytes()) == 0;
}

void check_alpha(const std::string& name, double alpha) {
  WICK_CHECK(alpha != 0.0 && std::isfinite(alpha), "LoRA '", name, "': alpha is ", alpha,
             " (unset? the scale is alpha / rank)");
}

// [out, r] @ [r, in] (Linear), or a convolution's [out, r, 1, 1] after [r, in, kh, kw] (kohya LoCon).
void check_pair(const std::string& name, const Tensor& down, const Tensor& up) {
  const bool linear = down.dim() == 2 && up.dim() == 2;
  const bool conv = down.dim() == 4 && up.dim() == 4 && up.size(2) == 1 && up.size(3) == 1;
  WICK_CHECK_KIND(Data, (linear || conv) && up.size(1) == down.size(0), "LoRA '", name, "': up ",
                  shape_text(up.shape()), " and down ", shape_text(down.shape()),
                  " do not chain as [out, r] @ [r, in] (or a conv's [out, r, 1, 1] after [r, in, kh, kw])");
}

// One PEFT part as read from the tensors.
struct PeftPartTensors {
  Tensor a, b, magnitude, alpha;
};

const char* const kPeftSuffixes[] = {".lora_A.weight", ".lora_B.weight", ".lora_magnitude_vector.weight",
                                     ".lora_magnitude_vector", ".alpha"};

// "transformer_blocks.0.attn.to_q" and the suffix of a PEFT key (without the prefix), or nullopt.
std::optional<std::pair<std::string, std::string>> split_peft_key(const std::string& key) {
  for (const char* suffix : kPeftSuffixes)
    if (ends_with(key, suffix))
      return std::make_pair(key.substr(0, key.size() - std::strlen(suffix)), std::string(suffix));
  return std::nullopt;
}

}  // namespace

namespace {

std::string block_module(const std::string& pattern, int64_t block) {
  std::string out = pattern;
  const size_t at = out.find("{N}");
  if (at != std::string::npos) out.replace(at, 3, std::to_string(block));
  return out;
}

}  // namespace

void add_one_to_one(LoraLayout& layout, const std::vector<std::pair<std::string, std::string>>& modules,
                    int64_t block) {
  for (const auto& [model, diffusers] : modules)
    layout.modules.push_back(
        {.module = block_module(model, block), .parts = {{.peft_module = block_module(diffusers, block)}}});
}

LoraModuleLayout fused_layout(const std::string& module, const std::string& peft_block,
                              const std::vector<std::string>& names, const std::vector<int64_t>& rows) {
  LoraModuleLayout entry{.module = module, .parts = {}};
  int64_t begin = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    entry.parts.push_back({.peft_module = peft_block + names[i], .row_begin = begin, .row_end = begin + rows[i]});
    begin += rows[i];
  }
  return entry;
}

const LoraModuleLayout* LoraLayout::find(const std::string& module) const {
  for (const LoraModuleLayout& entry : modules)
    if (entry.module == module) return &entry;
  return nullptr;
}

std::vector<std::string> LoraLayout::module_paths() const {
  std::vector<std::string> out;
  for (const LoraModuleLayout& entry : modules) out.push_back(entry.module);
  return out;
}

// ---- kohya ----

std::string kohya_module_name(const std::string& module_path) {
  std::string name = "lora_unet_" + module_path;
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

std::vector<std::pair<std::string, Tensor>> to_kohya(const LoraSet& set) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [module, lora] : set) {
    check_pair(module, lora.down, lora.up);
    check_alpha(module, lora.alpha);
    const std::string name = kohya_module_name(module);
    out.emplace_back(name + ".lora_down.weight", lora.down);
    out.emplace_back(name + ".lora_up.weight", lora.up);
    out.emplace_back(name + ".alpha", Tensor::scalar(lora.alpha, lora.down.dtype()));
    if (lora.dora_scale.defined()) out.emplace_back(name + ".dora_scale", lora.dora_scale);
  }
  return out;
}

LoraSet from_kohya(const std::map<std::string, Tensor>& tensors, const std::vector<std::string>& module_paths,
                   std::vector<std::string>* unused) {
  std::map<std::string, std::string> module_of;  // kohya name -> module path
  for (const std::string& path : module_paths) module_of[kohya_module_name(path)] = path;
  std::map<std::string, std::map<std::string, Tensor>> by_module;  // module -> suffix -> tensor
  std::vector<std::string> leftover;
  for (const auto& [key, tensor] : tensors) {
    bool claimed = false;
    for (const char* suffix : {".lora_down.weight", ".lora_up.weight", ".alpha", ".dora_scale"}) {
      if (!ends_with(key, suffix)) continue;
      auto it = module_of.find(key.substr(0, key.size() - std::strlen(suffix)));
      if (it == module_of.end()) break;
      by_module[it->second][suffix] = tensor;
      claimed = true;
      break;
    }
    if (!claimed) leftover.push_back(key);
  }
  report_unused(leftover, unused, "kohya LoRA");
  LoraSet set;
  for (auto& [module, parts] : by_module) {
    const std::string name = kohya_module_name(module);
    WICK_CHECK_KIND(Data, parts.count(".lora_down.weight") && parts.count(".lora_up.weight"), "kohya LoRA: '", name,
                    "' has ", parts.count(".lora_down.weight") ? "lora_down but no lora_up" : "no lora_down",
                    " weight");
    LoraTensors lora{.down = parts[".lora_down.weight"], .up = parts[".lora_up.weight"], .alpha = 0, .dora_scale = {}};
    check_pair(name, lora.down, lora.up);
    lora.alpha = parts.count(".alpha") ? parts[".alpha"].item() : static_cast<double>(lora.rank());
    if (parts.count(".dora_scale")) lora.dora_scale = parts[".dora_scale"];
    set[module] = lora;
  }
  return set;
}

// ---- PEFT ----

PeftScale peft_scales(const std::map<std::string, std::string>& metadata, const std::string& component) {
  auto it = metadata.find("lora_adapter_metadata");
  if (it == metadata.end()) return {};
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception& e) {
    WICK_FAIL(Data, "PEFT LoRA: metadata lora_adapter_metadata is not valid JSON: ", e.what());
  }
  const std::string key = component.empty() ? "" : component + ".";
  if (!json.is_object() || !json.contains(key + "lora_alpha")) return {};
  WICK_CHECK_KIND(Data, json[key + "lora_alpha"].is_number(), "PEFT LoRA: metadata ", key,
                  "lora_alpha is not a number");
  const double lora_alpha = json[key + "lora_alpha"].get<double>();
  const bool rslora = json.contains(key + "use_rslora") && json[key + "use_rslora"].is_boolean() &&
                      json[key + "use_rslora"].get<bool>();
  std::vector<std::pair<std::string, double>> patterns;
  if (json.contains(key + "alpha_pattern") && json[key + "alpha_pattern"].is_object())
    for (auto p = json[key + "alpha_pattern"].begin(); p != json[key + "alpha_pattern"].end(); ++p) {
      WICK_CHECK_KIND(Data, p.value().is_number(), "PEFT LoRA: metadata alpha_pattern \"", p.key(),
                      "\" is not a number");
      patterns.emplace_back(p.key(), p.value().get<double>());
    }
  return [lora_alpha, rslora, patterns](const std::string& module, int64_t rank) {
    double alpha = lora_alpha;
    for (const auto& [pattern, value] : patterns)
      if (module == pattern || ends_with(module, "." + pattern)) {
        alpha = value;
        break;
      }
    return alpha / (rslora ? std::sqrt(static_cast<double>(rank)) : static_cast<double>(rank));
  };
}

std::vector<std::pair<std::string, Tensor>> to_peft(const LoraSet& set, const LoraLayout& layout) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [module, lora] : set) {
    const LoraModuleLayout* entry = layout.find(module);
    WICK_CHECK(entry != nullptr, "to_peft: module '", module, "' has no diffusers/PEFT name in the layout (",
               layout.modules.size(), " modules, e.g. '", layout.modules.empty() ? "" : layout.modules[0].module, "')");
    check_pair(module, lora.down, lora.up);
    check_alpha(module, lora.alpha);
    const int64_t n_out = lora.up.size(0);
    const bool dora = lora.dora_scale.defined();
    WICK_CHECK(!dora || (lora.dora_scale.dim() == 1 && lora.dora_scale.size(0) == n_out), "to_peft: module '", module,
               "' has DoRA magnitude ", shape_text(lora.dora_scale.shape()), "; PEFT's lora_magnitude_vector is per ",
               "output row [", n_out, "] (an input-axis dora_scale [1, in] can only be saved kohya style)");
    const Tensor up = scaled(lora.up, lora.scale());
    int64_t covered = 0;
    for (const LoraPart& part : entry->parts) {
      const int64_t end = part.row_end < 0 ? n_out : part.row_end;
      WICK_CHECK(part.row_begin == covered && end > part.row_begin && end <= n_out, "to_peft: module '", module,
                 "' has ", n_out, " rows; the layout's part ", part.peft_module, " takes rows [", part.row_begin, ", ",
                 end, ")");
      covered = end;
      Tensor b = up.narrow(0, part.row_begin, end - part.row_begin);
      const std::string name = layout.peft_prefix + part.peft_module;
      out.emplace_back(name + ".lora_A.weight", lora.down);
      out.emplace_back(name + ".lora_B.weight", part.swap_halves ? swap_row_halves(b) : b);
      if (dora) {
        Tensor m = lora.dora_scale.narrow(0, part.row_begin, end - part.row_begin);
        out.emplace_back(name + ".lora_magnitude_vector", part.swap_halves ? swap_row_halves(m) : m);
      }
    }
    WICK_CHECK(covered == n_out, "to_peft: the layout's parts of '", module, "' cover ", covered, " of its ", n_out,
               " rows");
  }
  return out;
}

LoraSet from_peft(const std::map<std::string, Tensor>& tensors, const LoraLayout& layout, const PeftScale& scale,
                  std::vector<std::string>* unused) {
  std::map<std::string, std::pair<size_t, size_t>> part_of;  // peft module -> (module index, part index)
  for (size_t m = 0; m < layout.modules.size(); ++m)
    for (size_t p = 0; p < layout.modules[m].parts.size(); ++p)
      part_of[layout.modules[m].parts[p].peft_module] = {m, p};
  std::map<size_t, std::map<size_t, PeftPartTensors>> found;  // module index -> part index -> tensors
  std::vector<std::string> leftover;
  for (const auto& [key, tensor] : tensors) {
    std::optional<std::pair<std::string, std::string>> split;
    if (key.rfind(layout.peft_prefix, 0) == 0) split = split_peft_key(key.substr(layout.peft_prefix.size()));
    auto it = split ? part_of.find(split->first) : part_of.end();
    if (it == part_of.end()) {
      leftover.push_back(key);
      continue;
    }
    PeftPartTensors& part = found[it->second.first][it->second.second];
    const std::string& suffix = split->second;
    if (suffix == ".lora_A.weight")
      part.a = tensor;
    else if (suffix == ".lora_B.weight")
      part.b = tensor;
    else if (suffix == ".alpha")
      part.alpha = tensor;
    else
      part.magnitude = tensor;
  }
  report_unused(leftover, unused, "PEFT LoRA");

  LoraSet set;
  for (auto& [module_index, parts] : found) {
    const LoraModuleLayout& entry = layout.modules[module_index];
    // Each present part: its rows, scaled B (rows in model order) and A.
    struct Ready {
      int64_t row_begin, n_rows;
      Tensor a, b, magnitude;
    };
    std::vector<Ready> ready;
    int64_t n_out = 0;
    for (size_t p = 0; p < entry.parts.size(); ++p) {
      const LoraPart& part = entry.parts[p];
      auto found_part = parts.find(p);
      if (found_part == parts.end()) {
        WICK_CHECK_KIND(Data, part.row_end >= 0, "PEFT LoRA: ", layout.peft_prefix, part.peft_module,
                        " is absent and the layout gives no row count for it (module '", entry.module, "')");
        n_out = std::max(n_out, part.row_end);
        continue;
      }
      const PeftPartTensors& t = found_part->second;
      const std::string name = layout.peft_prefix + part.peft_module;
      WICK_CHECK_KIND(Data, t.a.defined() && t.b.defined(), "PEFT LoRA: ", name, " has ",
                      t.a.defined() ? "lora_A but no lora_B" : "no lora_A", " weight");
      check_pair(name, t.a, t.b);
      const int64_t rows = t.b.size(0);
      if (part.row_end >= 0)
        WICK_CHECK_KIND(Data, rows == part.row_end - part.row_begin, "PEFT LoRA: ", name, ".lora_B.weight has ", rows,
                        " rows; module '", entry.module, "' takes ", part.row_end - part.row_begin, " rows [",
                        part.row_begin, ", ", part.row_end, ") from it (another model size?)");
      const int64_t rank = t.a.size(0);
      double s = 1.0;
      if (t.alpha.defined())
        s = t.alpha.item() / static_cast<double>(rank);
      else if (scale)
        s = scale(part.peft_module, rank);
      Tensor b = scaled(t.b, s);
      Tensor magnitude = t.magnitude;
      if (magnitude.defined())
        WICK_CHECK_KIND(Data, magnitude.dim() == 1 && magnitude.size(0) == rows, "PEFT LoRA: ", name,
                        ".lora_magnitude_vector has shape ", shape_text(magnitude.shape()), ", not [", rows, "]");
      if (part.swap_halves) {
        b = swap_row_halves(b);
        if (magnitude.defined()) magnitude = swap_row_halves(magnitude);
      }
      ready.push_back({part.row_begin, rows, t.a, b, magnitude});
      n_out = std::max(n_out, part.row_begin + rows);
    }
    const int64_t n_in = ready[0].a.size(1);
    for (const Ready& r : ready)
      WICK_CHECK_KIND(Data, r.a.size(1) == n_in, "PEFT LoRA: the parts of module '", entry.module,
                      "' take different input widths (", n_in, " and ", r.a.size(1), ")");

    const bool shared_a =
        std::all_of(ready.begin(), ready.end(), [&](const Ready& r) { return bitwise_equal(r.a, ready[0].a); });
    LoraTensors lora;
    if (ready.size() == 1 && entry.parts.size() == 1) {
      lora.down = ready[0].a;
      lora.up = ready[0].b;
    } else if (shared_a) {
      lora.down = ready[0].a;
      lora.up = zeros({n_out, lora.down.size(0)}, ready[0].b.dtype(), ready[0].b.device());
      for (const Ready& r : ready) lora.up.narrow(0, r.row_begin, r.n_rows).copy_from(r.b);
    } else {
      std::vector<Tensor> downs;
      for (const Ready& r : ready) downs.push_back(r.a);
      lora.down = concat(downs, 0);
      lora.up = zeros({n_out, lora.down.size(0)}, ready[0].b.dtype(), ready[0].b.device());
      int64_t column = 0;
      for (const Ready& r : ready) {
        lora.up.narrow(0, r.row_begin, r.n_rows).narrow(1, column, r.a.size(0)).copy_from(r.b);
        column += r.a.size(0);
      }
    }
    lora.alpha = static_cast<double>(lora.rank());
    const size_t n_magnitudes = static_cast<size_t>(
        std::count_if(ready.begin(), ready.end(), [](const Ready& r) { return r.magnitude.defined(); }));
    if (n_magnitudes > 0) {
      WICK_CHECK_KIND(Data, n_magnitudes == entry.parts.size(), "PEFT LoRA: module '", entry.module, "' has a ",
                      "lora_magnitude_vector for ", n_magnitudes, " of its ", entry.parts.size(),
                      " parts; DoRA needs all of them");
      lora.dora_scale = Tensor::empty({n_out}, ready[0].magnitude.dtype(), ready[0].magnitude.device());
      for (const Ready& r : ready) lora.dora_scale.narrow(0, r.row_begin, r.n_rows).copy_from(r.magnitude);
    }
    set[entry.module] = lora;
  }
  return set;
}

// ---- files ----

LoraFile read_lora_file(const std::string& path) {
  SafetensorsFile file = SafetensorsFile::open(path);
  LoraFile out;
  out.metadata = file.metadata();
  bool kohya = false, peft = false;
  for (const std::string& name : file.names()) {
    out.tensors[name] = file.get(name);
    kohya = kohya || ends_with(name, ".lora_down.weight");
    peft = peft || ends_with(name, ".lora_A.weight");
  }
  WICK_CHECK_KIND(Data, kohya || peft, "LoRA: ", path, " has no '.lora_down.weight' (kohya) or '.lora_A.weight' ",
                  "(PEFT) tensor; not a LoRA file?");
  out.format = kohya ? LoraFileFormat::Kohya : LoraFileFormat::Peft;
  return out;
}

}  // namespace wick
