// Splitting optimizer state into block-aligned shards, merging shards back, and their files.
#include "engine/checkpoint/optimizer_shards.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "engine/checkpoint/checkpoint_files.h"
#include "engine/optim/optimizer.h"
#include "runtime/error.h"
#include "runtime/ops/copy.h"
#include "runtime/safetensors.h"

namespace wick {
namespace {

constexpr const char* kFormat = "wick.optimizer_state";
constexpr int kVersion = 1;
constexpr int64_t kBlock = quantization_block_size;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Block-wise state (one value per 256 elements) vs element-wise state.
bool is_blockwise(const std::string& state_name) { return state_name.rfind("absmax", 0) == 0; }

// Splits "<param>.<state>" by the longest parameter name that prefixes it; nullptr when none does.
const OptimizerParameterLayout* owner_of(const OptimizerLayout& layout, const std::string& tensor_name,
                                         std::string& state_name) {
  for (size_t dot = tensor_name.rfind('.'); dot != std::string::npos && dot > 0;
       dot = tensor_name.rfind('.', dot - 1)) {
    if (const OptimizerParameterLayout* p = layout.find(tensor_name.substr(0, dot))) {
      state_name = tensor_name.substr(dot + 1);
      return p;
    }
  }
  return nullptr;
}

nlohmann::json layout_json(const OptimizerLayout& layout) {
  nlohmann::json parameters = nlohmann::json::array();
  for (const OptimizerParameterLayout& p : layout.parameters)
    parameters.push_back({{"name", p.name}, {"shape", p.shape}, {"numel", p.numel}, {"offset", p.offset},
                          {"eight_bit", p.eight_bit}});
  return {{"optimizer", layout.optimizer}, {"flat_numel", layout.flat_numel}, {"parameters", parameters}};
}

OptimizerLayout parse_layout(const std::string& text, const std::string& path) {
  try {
    nlohmann::json json = nlohmann::json::parse(text);
    OptimizerLayout layout;
    layout.optimizer = json.at("optimizer").get<std::string>();
    layout.flat_numel = json.at("flat_numel").get<int64_t>();
    for (const nlohmann::json& p : json.at("parameters"))
      layout.parameters.push_back({p.at("name").get<std::string>(), p.at("shape").get<Shape>(),
                                   p.at("numel").get<int64_t>(), p.at("offset").get<int64_t>(),
                                   p.at("eight_bit").get<bool>()});
    return layout;
  } catch (const nlohmann::json::exception& e) {
    WICK_FAIL(Data, path, ": bad \"layout\" metadata (", e.what(), ")");
  }
}

const std::string& metadata_field(const SafetensorsFile& file, const std::string& key) {
  auto found = file.metadata().find(key);
  if (found == file.metadata().end())
    WICK_FAIL(Data, file.path(), ": metadata lacks \"", key, "\" (not a wick optimizer-state file?)");
  return found->second;
}

int64_t metadata_int(const SafetensorsFile& file, const std::string& key) {
  const std::string& text = metadata_field(file, key);
  try {
    size_t used = 0;
    int64_t value = std::stoll(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  WICK_FAIL(Data, file.path(), ": metadata \"", key, "\" is not an integer: \"", text, "\"");
}

void check_format(const SafetensorsFile& file) {
  const std::string& format = metadata_field(file, "format");
  if (format != kFormat) WICK_FAIL(Data, file.path(), ": format is \"", format, "\", expected \"", kFormat, "\"");
  int64_t version = metadata_int(file, "format_version");
  if (version > kVersion)
    WICK_FAIL(Data, file.path(), ": format_version ", version, " is newer than this wick reads (", kVersion, ")");
}

NamedTensors read_all(const SafetensorsFile& file) {
  NamedTensors out;
  for (const std::string& name : file.names()) out.emplace_back(name, file.get(name));
  return out;
}

std::string describe_source(const OptimizerShard& shard) {
  return shard.source.empty() ? "shard rank " + std::to_string(shard.rank) : shard.source;
}

// save_safetensors, hashing the bytes as they are written.
FileDigest save_hashed(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Sha256 digest;
  save_safetensors(path, tensors, metadata, [&digest](const void* data, size_t bytes) { digest.update(data, bytes); });
  return digest.finish();
}

OptimizerShard shard_from_file(const SafetensorsFile& file) {
  const std::string& path = file.path();
  check_format(file);
  if (metadata_field(file, "sharded") != "true")
    WICK_FAIL(Data, path, ": not a shard file (sharded = \"", metadata_field(file, "sharded"), "\")");
  OptimizerShard shard;
  shard.source = path;
  shard.rank = static_cast<int>(metadata_int(file, "rank"));
  shard.world_size = static_cast<int>(metadata_int(file, "world_size"));
  shard.range = {metadata_int(file, "flat_begin"), metadata_int(file, "flat_end")};
  shard.layout = parse_layout(metadata_field(file, "layout"), path);
  try {
    for (const nlohmann::json& piece : nlohmann::json::parse(metadata_field(file, "pieces")))
      shard.pieces.push_back(
          {piece.at("parameter").get<std::string>(), piece.at("begin").get<int64_t>(), piece.at("end").get<int64_t>()});
  } catch (const nlohmann::json::exception& e) {
    WICK_FAIL(Data, path, ": bad \"pieces\" metadata (", e.what(), ")");
  }
  shard.tensors = read_all(file);
  return shard;
}

}  // namespace

const OptimizerParameterLayout* OptimizerLayout::find(const std::string& name) const {
  for (const OptimizerParameterLayout& p : parameters)
    if (p.name == name) return &p;
  return nullptr;
}

OptimizerLayout optimizer_layout(const Optimizer& optimizer) {
  OptimizerLayout layout{optimizer.name(), optimizer.flat_numel(), {}};
  for (const ParameterSlot& slot : optimizer.parameters())
    layout.parameters.push_back({slot.name, slot.parameter.shape(), slot.numel, slot.offset, slot.eight_bit});
  std::sort(layout.parameters.begin(), layout.parameters.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  return layout;
}

std::vector<FlatRange> zero_partition(int64_t flat_numel, int world_size) {
  WICK_CHECK(world_size >= 1, "zero_partition: world_size must be >= 1, got ", world_size);
  WICK_CHECK(flat_numel >= 0, "zero_partition: flat_numel must be >= 0, got ", flat_numel);
  int64_t per_rank = ceil_div(ceil_div(flat_numel, kBlock), world_size) * kBlock;
  std::vector<FlatRange> ranges;
  for (int r = 0; r < world_size; ++r) {
    int64_t begin = std::min(flat_numel, r * per_rank), end = std::min(flat_numel, (r + 1) * per_rank);
    ranges.push_back({begin, end});
  }
  return ranges;
}

std::vector<OptimizerShard> split_optimizer_state(const NamedTensors& state, const OptimizerLayout& layout,
                                                  const std::vector<FlatRange>& ranges) {
  const char* op = "split_optimizer_state";
  WICK_CHECK(!ranges.empty(), op, ": no ranges");
  int64_t expected_begin = 0;
  for (size_t r = 0; r < ranges.size(); ++r) {
    const FlatRange& range = ranges[r];
    WICK_CHECK(range.begin == expected_begin && range.end >= range.begin, op, ": range ", r, " is [", range.begin,
               ", ", range.end, "), expected it to start at ", expected_begin, " (sorted, no gaps)");
    WICK_CHECK(range.begin % kBlock == 0 && (range.end % kBlock == 0 || range.end == layout.flat_numel), op,
               ": range ", r, " [", range.begin, ", ", range.end, ") is not on 256-element block boundaries");
    expected_begin = range.end;
  }
  WICK_CHECK(expected_begin == layout.flat_numel, op, ": ranges end at ", expected_begin, ", the flat buffers at ",
             layout.flat_numel);

  // Group the state by parameter; "step" is replicated into every shard.
  Tensor step;
  std::map<std::string, std::vector<std::pair<std::string, Tensor>>> by_parameter;  // param -> (state, flat)
  for (const auto& [tensor_name, tensor] : state) {
    if (tensor_name == "step") {
      step = tensor.to(Device::cpu()).clone();
      continue;
    }
    std::string state_name;
    const OptimizerParameterLayout* p = owner_of(layout, tensor_name, state_name);
    WICK_CHECK(p != nullptr, op, ": tensor \"", tensor_name, "\" belongs to no parameter of the layout");
    int64_t expected = is_blockwise(state_name) ? n_quantization_blocks(p->numel) : p->numel;
    WICK_CHECK(tensor.numel() == expected, op, ": tensor \"", tensor_name, "\" has ", tensor.numel(),
               " elements, expected ", expected);
    by_parameter[p->name].emplace_back(state_name, tensor.to(Device::cpu()).reshape({tensor.numel()}));
  }
  WICK_CHECK(step.defined(), op, ": the state has no \"step\" tensor");

  std::vector<OptimizerShard> shards(ranges.size());
  for (size_t r = 0; r < ranges.size(); ++r) {
    OptimizerShard& shard = shards[r];
    shard.rank = static_cast<int>(r);
    shard.world_size = static_cast<int>(ranges.size());
    shard.range = ranges[r];
    shard.layout = layout;
    shard.tensors.emplace_back("step", step);
    for (const OptimizerParameterLayout& p : layout.parameters) {
      int64_t begin = std::max(p.offset, ranges[r].begin) - p.offset;
      int64_t end = std::min(p.offset + p.numel, ranges[r].end) - p.offset;
      if (end <= begin) continue;
      shard.pieces.push_back({p.name, begin, end});
      for (const auto& [state_name, flat] : by_parameter[p.name]) {
        Tensor slice = is_blockwise(state_name) ? flat.slice(0, begin / kBlock, ceil_div(end, kBlock))
                                                : flat.slice(0, begin, end);
        shard.tensors.emplace_back(p.name + "." + state_name, slice.clone());
      }
    }
  }
  return shards;
}

NamedTensors merge_optimizer_shards(const std::vector<OptimizerShard>& shards) {
  const char* op = "merge_optimizer_shards";
  WICK_CHECK_KIND(Data, !shards.empty(), op, ": no shards");
  const OptimizerShard& first = shards.front();
  const OptimizerLayout& layout = first.layout;

  struct Part {
    int64_t begin, end;
    const OptimizerShard* shard;
  };
  std::map<std::string, std::vector<Part>> parts;
  Tensor step;
  int64_t step_value = 0;
  for (const OptimizerShard& shard : shards) {
    if (!(shard.layout == layout))
      WICK_FAIL(Data, op, ": ", describe_source(shard), " was written for another parameter layout than ",
                describe_source(first), " (shards of different runs or optimizers?)");
    for (const auto& [tensor_name, tensor] : shard.tensors) {
      if (tensor_name != "step") continue;
      int64_t value = tensor.to_vector<int64_t>().at(0);
      if (!step.defined()) {
        step = tensor;
        step_value = value;
      } else if (value != step_value) {
        WICK_FAIL(Data, op, ": ", describe_source(shard), " is at step ", value, " but ", describe_source(first),
                  " at step ", step_value);
      }
    }
    for (const ShardPiece& piece : shard.pieces) {
      const OptimizerParameterLayout* p = layout.find(piece.parameter);
      if (!p) WICK_FAIL(Data, op, ": ", describe_source(shard), " holds unknown parameter \"", piece.parameter, "\"");
      if (piece.begin < 0 || piece.end > p->numel || piece.begin >= piece.end || piece.begin % kBlock != 0)
        WICK_FAIL(Data, op, ": ", describe_source(shard), " holds elements [", piece.begin, ", ", piece.end,
                  ") of \"", piece.parameter, "\" (", p->numel, " elements): not a block-aligned range");
      parts[piece.parameter].push_back({piece.begin, piece.end, &shard});
    }
  }
  if (!step.defined()) WICK_FAIL(Data, op, ": no shard holds \"step\"");

  NamedTensors out;
  out.emplace_back("step", step.clone());
  for (const OptimizerParameterLayout& p : layout.parameters) {
    std::vector<Part>& list = parts[p.name];
    std::sort(list.begin(), list.end(), [](const Part& a, const Part& b) { return a.begin < b.begin; });
    int64_t covered = 0;
    for (const Part& part : list) {
      if (part.begin < covered)
        WICK_FAIL(Data, op, ": elements [", part.begin, ", ", std::min(covered, part.end), ") of \"", p.name,
                  "\" are held twice (", describe_source(*part.shard), " and another shard)");
      if (part.begin > covered)
        WICK_FAIL(Data, op, ": elements [", covered, ", ", part.begin, ") of \"", p.name,
                  "\" are in none of the shards given (a missing rank file?)");
      covered = part.end;
    }
    if (covered != p.numel)
      WICK_FAIL(Data, op, ": elements [", covered, ", ", p.numel, ") of \"", p.name,
                "\" are in none of the shards given (a missing rank file?)");

    // The state names come from the first piece; every piece must have the same ones.
    std::vector<std::string> state_names;
    const std::string prefix = p.name + ".";
    for (const auto& [tensor_name, tensor] : list.front().shard->tensors) {
      std::string state_name;
      if (tensor_name.rfind(prefix, 0) == 0 && owner_of(layout, tensor_name, state_name) == &p)
        state_names.push_back(state_name);
    }
    for (const std::string& state_name : state_names) {
      bool blockwise = is_blockwise(state_name);
      Tensor whole;
      for (const Part& part : list) {
        const Tensor* piece = nullptr;
        for (const auto& [tensor_name, tensor] : part.shard->tensors)
          if (tensor_name == prefix + state_name) piece = &tensor;
        if (!piece)
          WICK_FAIL(Data, op, ": ", describe_source(*part.shard), " lacks \"", prefix + state_name, "\"");
        int64_t begin = blockwise ? part.begin / kBlock : part.begin;
        int64_t end = blockwise ? ceil_div(part.end, kBlock) : part.end;
        if (piece->numel() != end - begin)
          WICK_FAIL(Data, op, ": ", describe_source(*part.shard), ": \"", prefix + state_name, "\" has ",
                    piece->numel(), " elements, expected ", end - begin);
        if (!whole.defined())
          whole = Tensor::empty({blockwise ? n_quantization_blocks(p.numel) : p.numel}, piece->dtype());
        if (piece->dtype() != whole.dtype())
          WICK_FAIL(Data, op, ": ", describe_source(*part.shard), ": \"", prefix + state_name, "\" is ",
                    dtype_name(piece->dtype()), ", another shard has ", dtype_name(whole.dtype()));
        whole.slice(0, begin, end).copy_from(piece->reshape({piece->numel()}));
      }
      // Element-wise state keeps the parameter's shape only for the master (as state_tensors()).
      if (state_name == "master") whole = whole.view(p.shape);
      out.emplace_back(prefix + state_name, whole);
    }
  }
  return out;
}

std::string optimizer_shard_file_name(int rank, int world_size) {
  return "optimizer.rank" + std::to_string(rank) + "-of-" + std::to_string(world_size) + ".safetensors";
}

FileDigest save_optimizer_shard(const std::string& path, const OptimizerShard& shard) {
  nlohmann::json pieces = nlohmann::json::array();
  for (const ShardPiece& piece : shard.pieces)
    pieces.push_back({{"parameter", piece.parameter}, {"begin", piece.begin}, {"end", piece.end}});
  std::map<std::string, std::string> metadata = {
      {"format", kFormat},
      {"format_version", std::to_string(kVersion)},
      {"optimizer", shard.layout.optimizer},
      {"sharded", "true"},
      {"rank", std::to_string(shard.rank)},
      {"world_size", std::to_string(shard.world_size)},
      {"flat_begin", std::to_string(shard.range.begin)},
      {"flat_end", std::to_string(shard.range.end)},
      {"layout", layout_json(shard.layout).dump()},
      {"pieces", pieces.dump()},
  };
  return save_hashed(path, shard.tensors, metadata);
}

FileDigest save_optimizer_state(const std::string& path, const NamedTensors& state, const OptimizerLayout& layout) {
  std::map<std::string, std::string> metadata = {
      {"format", kFormat},
      {"format_version", std::to_string(kVersion)},
      {"optimizer", layout.optimizer},
      {"sharded", "false"},
      {"world_size", "1"},
      {"layout", layout_json(layout).dump()},
  };
  return save_hashed(path, state, metadata);
}

NamedTensors load_optimizer_state(const CheckpointFiles& files, OptimizerLayout* layout) {
  const std::string dir = files.dir().string();
  if (files.contains("optimizer.safetensors")) {
    SafetensorsFile file = files.safetensors("optimizer.safetensors");
    check_format(file);
    if (layout) *layout = parse_layout(metadata_field(file, "layout"), file.path());
    return read_all(file);
  }
  static const std::regex shard_name(R"(optimizer\.rank(\d+)-of-(\d+)\.safetensors)");
  std::map<int, std::set<int>> ranks_by_size;
  for (const std::string& name : files.names()) {
    std::smatch match;
    if (std::regex_match(name, match, shard_name))
      ranks_by_size[std::stoi(match[2].str())].insert(std::stoi(match[1].str()));
  }
  if (ranks_by_size.empty())
    WICK_FAIL(Data, dir, ": no optimizer state (neither optimizer.safetensors nor optimizer.rank<R>-of-<N>"
              ".safetensors)");
  if (ranks_by_size.size() > 1)
    WICK_FAIL(Data, dir, ": optimizer shard files of several world sizes (", ranks_by_size.begin()->first,
              " and ", ranks_by_size.rbegin()->first, ")");
  int world_size = ranks_by_size.begin()->first;
  std::vector<OptimizerShard> shards;
  for (int r = 0; r < world_size; ++r) {
    std::string name = optimizer_shard_file_name(r, world_size);
    if (!ranks_by_size.begin()->second.count(r))
      WICK_FAIL(Data, "missing optimizer shard file ", (files.dir() / name).string());
    shards.push_back(shard_from_file(files.safetensors(name)));
    if (shards.back().rank != r || shards.back().world_size != world_size)
      WICK_FAIL(Data, shards.back().source, ": its metadata says rank ", shards.back().rank, " of ",
                shards.back().world_size);
  }
  if (layout) *layout = shards.front().layout;
  return merge_optimizer_shards(shards);
}

NamedTensors load_optimizer_state(const std::string& checkpoint_dir, OptimizerLayout* layout) {
  return load_optimizer_state(CheckpointFiles::unverified(checkpoint_dir), layout);
}

OptimizerLayout read_optimizer_layout(const SafetensorsFile& file) {
  check_format(file);
  return parse_layout(metadata_field(file, "layout"), file.path());
}

std::vector<OptimizerShard> reshard_optimizer_state(const CheckpointFiles& files, int world_size) {
  OptimizerLayout layout;
  NamedTensors state = load_optimizer_state(files, &layout);
  return split_optimizer_state(state, layout, zero_partition(layout.flat_numel, world_size));
}

std::vector<OptimizerShard> reshard_optimizer_state(const std::string& checkpoint_dir, int world_size) {
  return reshard_optimizer_state(CheckpointFiles::unverified(checkpoint_dir), world_size);
}

}  // namespace wick

namespace wick {

OptimizerShard local_optimizer_shard(const Optimizer& optimizer, int rank, int world_size) {
  auto [begin, end] = optimizer.owned_range();
  OptimizerShard shard;
  shard.rank = rank;
  shard.world_size = world_size;
  shard.range = {begin, end};
  shard.layout = optimizer_layout(optimizer);
  shard.tensors.emplace_back("step", Tensor::scalar(static_cast<double>(optimizer.steps_taken()), DType::I64));
  for (const ParameterSlot& slot : optimizer.parameters()) {
    int64_t piece_begin = std::max(slot.offset, begin) - slot.offset;
    int64_t piece_end = std::min(slot.offset + slot.numel, end) - slot.offset;
    if (piece_end <= piece_begin) continue;
    shard.pieces.push_back({slot.name, piece_begin, piece_end});
    for (const auto& [state_name, view] : optimizer.state_range(slot, piece_begin, piece_end))
      shard.tensors.emplace_back(slot.name + "." + state_name, view.to(Device::cpu()).clone());
  }
  return shard;
}

void load_optimizer_shard_into(Optimizer& optimizer, const OptimizerShard& shard) {
  const char* op = "load_optimizer_shard_into";
  auto [begin, end] = optimizer.owned_range();
  WICK_CHECK_KIND(Data, shard.layout == optimizer_layout(optimizer), op, ": ", describe_source(shard),
                  " was written for another parameter layout or optimizer than this ", optimizer.name(), " one");
  WICK_CHECK_KIND(Data, shard.range.begin == begin && shard.range.end == end, op, ": ", describe_source(shard),
                  " holds flat elements [", shard.range.begin, ", ", shard.range.end, ") but this rank owns [", begin,
                  ", ", end, ")");
  std::map<std::string, Tensor> given;
  for (const auto& [name, tensor] : shard.tensors) given[name] = tensor;
  WICK_CHECK_KIND(Data, given.count("step") != 0, op, ": ", describe_source(shard), " has no \"step\" tensor");
  int64_t step = given.at("step").to_vector<int64_t>().at(0);
  // f32 masters come from the parameters; 16-bit ones (and the state) from the shard.
  for (const ParameterSlot& slot : optimizer.parameters()) copy_into(slot.master, slot.parameter);
  for (const ParameterSlot& slot : optimizer.parameters()) {
    int64_t piece_begin = std::max(slot.offset, begin) - slot.offset;
    int64_t piece_end = std::min(slot.offset + slot.numel, end) - slot.offset;
    if (piece_end <= piece_begin) continue;
    for (const auto& [state_name, view] : optimizer.state_range(slot, piece_begin, piece_end)) {
      std::string name = slot.name + "." + state_name;
      auto found = given.find(name);
      WICK_CHECK_KIND(Data, found != given.end(), op, ": ", describe_source(shard), " lacks \"", name, "\"");
      WICK_CHECK_KIND(Data, found->second.numel() == view.numel() && found->second.dtype() == view.dtype(), op, ": ",
                      describe_source(shard), ": \"", name, "\" is ", found->second.describe(), ", expected ",
                      view.numel(), " elements of ", dtype_name(view.dtype()));
      copy_into(view, found->second.reshape(view.shape()));
    }
  }
  optimizer.set_steps_taken(step);
  optimizer.gather_and_write_back();
}

}  // namespace wick
