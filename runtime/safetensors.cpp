#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "runtime/atomic_file.h"
#include "runtime/byte_observer_thread.h"

namespace wick {

namespace {

// Same limit as the reference implementation: a larger header is treated as corrupt.
constexpr uint64_t max_header_bytes = 100'000'000;

struct FormatDtype {
  const char* name;
  int bits;
  std::optional<DType> wick;
  int rank;  // position in the reference implementation's Dtype enum (its write-order key)
};

// Every dtype of the format, in the reference implementation's enum order.
const FormatDtype format_dtypes[] = {
    {"BOOL", 8, DType::U8, 0},        {"F4", 4, std::nullopt, 1},       {"F6_E2M3", 6, std::nullopt, 2},
    {"F6_E3M2", 6, std::nullopt, 3},  {"U8", 8, DType::U8, 4},          {"I8", 8, DType::I8, 5},
    {"F8_E5M2", 8, std::nullopt, 6},  {"F8_E4M3", 8, std::nullopt, 7},  {"F8_E8M0", 8, std::nullopt, 8},
    {"F8_E4M3FNUZ", 8, std::nullopt, 9}, {"F8_E5M2FNUZ", 8, std::nullopt, 10}, {"I16", 16, std::nullopt, 11},
    {"U16", 16, std::nullopt, 12},    {"F16", 16, DType::F16, 13},      {"BF16", 16, DType::BF16, 14},
    {"I32", 32, DType::I32, 15},      {"U32", 32, std::nullopt, 16},    {"F32", 32, DType::F32, 17},
    {"C64", 64, std::nullopt, 18},    {"F64", 64, DType::F64, 19},      {"I64", 64, DType::I64, 20},
    {"U64", 64, std::nullopt, 21},
};

const FormatDtype* find_format_dtype(const std::string& name) {
  for (const FormatDtype& d : format_dtypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string valid_dtype_list() {
  std::string list;
  for (const FormatDtype& d : format_dtypes) {
    if (!list.empty()) list += ' ';
    list += d.name;
  }
  return list;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative JSON integer, or nullopt (negative, fractional, too large, not a number).
std::optional<uint64_t> json_u64(const nlohmann::json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  return value.get<uint64_t>();
}

}  // namespace

// ---- reading ----

#define WICK_SAFETENSORS_FAIL(...) WICK_FAIL(Data, "safetensors: ", path, ": ", __VA_ARGS__)

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  // Private, copy-on-write mapping: reading is zero-copy, and a loaded weight made trainable can be
  // updated in place (the OS copies only the pages written); the file itself never changes.
  std::shared_ptr<MappedFile> mapped;
  try {
    mapped = MappedFile::open(path);
  } catch (const WickError& e) {
    throw WickError(e.kind(), std::string("safetensors: ") + e.what());
  }
  return open(std::move(mapped));
}

SafetensorsFile SafetensorsFile::open(std::shared_ptr<MappedFile> mapped) {
  WICK_CHECK(mapped != nullptr, "SafetensorsFile::open: no mapped file");
  const std::string path = mapped->path();
  SafetensorsFile file;
  file.path_ = path;
  uint64_t file_bytes = mapped->size();
  if (file_bytes < 8) WICK_SAFETENSORS_FAIL("file is ", file_bytes, " bytes, shorter than the 8-byte header length");
  file.mapping_ = std::move(mapped);
  const uint8_t* bytes = file.mapping_->data();

  uint64_t header_bytes = read_u64_le(bytes);
  if (header_bytes > max_header_bytes)
    WICK_SAFETENSORS_FAIL("header length ", header_bytes, " exceeds the limit of ", max_header_bytes, " bytes");
  if (header_bytes > file_bytes - 8)
    WICK_SAFETENSORS_FAIL("header length ", header_bytes, " runs past the end of the file (", file_bytes,
                          " bytes)");
  uint64_t data_start = 8 + header_bytes;
  uint64_t data_bytes = file_bytes - data_start;

  // nlohmann's parser stops at a NUL byte; raw NUL is never valid JSON (the reference rejects it).
  if (const void* nul = std::memchr(bytes + 8, 0, header_bytes))
    WICK_SAFETENSORS_FAIL("header is not valid JSON: NUL byte at header offset ",
                          static_cast<const uint8_t*>(nul) - (bytes + 8));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + data_start);
  } catch (const nlohmann::json::exception& e) {
    WICK_SAFETENSORS_FAIL("header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) WICK_SAFETENSORS_FAIL("header is not a JSON object but ", header.type_name());

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& value = it.value();
    if (name == "__metadata__") {
      if (!value.is_object()) WICK_SAFETENSORS_FAIL("__metadata__ is not an object");
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string())
          WICK_SAFETENSORS_FAIL("__metadata__ value of \"", m.key(), "\" is not a string but ", m.value().type_name());
        file.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!value.is_object()) WICK_SAFETENSORS_FAIL("tensor \"", name, "\": entry is not an object");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!value.contains(field)) WICK_SAFETENSORS_FAIL("tensor \"", name, "\": missing \"", field, "\"");
    const nlohmann::json& dtype_json = value["dtype"];
    const nlohmann::json& shape_json = value["shape"];
    const nlohmann::json& offsets_json = value["data_offsets"];
    if (!dtype_json.is_string()) WICK_SAFETENSORS_FAIL("tensor \"", name, "\": \"dtype\" is not a string");
    if (!shape_json.is_array()) WICK_SAFETENSORS_FAIL("tensor \"", name, "\": \"shape\" is not an array");
    if (!offsets_json.is_array() || offsets_json.size() != 2)
      WICK_SAFETENSORS_FAIL("tensor \"", name, "\": \"data_offsets\" is not an array of two integers");

    SafetensorsInfo info;
    info.dtype = dtype_json.get<std::string>();
    const FormatDtype* format = find_format_dtype(info.dtype);
    if (format == nullptr)
      WICK_SAFETENSORS_FAIL("tensor \"", name, "\": unknown dtype \"", info.dtype, "\" (valid: ", valid_dtype_list(),
                            ")");
    info.wick_dtype = format->wick;
    info.element_bits = format->bits;

    uint64_t n_elements = 1;
    for (const nlohmann::json& extent_json : shape_json) {
      std::optional<uint64_t> extent = json_u64(extent_json);
      if (!extent || *extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        WICK_SAFETENSORS_FAIL("tensor \"", name, "\": shape ", shape_json.dump(),
                              " has an extent that is not an integer in [0, 2^63)");
      if (__builtin_mul_overflow(n_elements, *extent, &n_elements) ||
          n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        WICK_SAFETENSORS_FAIL("tensor \"", name, "\": shape ", shape_json.dump(), " overflows the element count");
      info.shape.push_back(static_cast<int64_t>(*extent));
    }
    uint64_t n_bits = 0;
    if (__builtin_mul_overflow(n_elements, static_cast<uint64_t>(format->bits), &n_bits))
      WICK_SAFETENSORS_FAIL("tensor \"", name, "\": shape ", shape_json.dump(), " overflows the byte count");
    if (n_bits % 8 != 0)
      WICK_SAFETENSORS_FAIL("tensor \"", name, "\": ", n_elements, " elements of ", info.dtype,
                            " do not fill a whole number of bytes");
    uint64_t n_bytes = n_bits / 8;

    std::optional<uint64_t> begin = json_u64(offsets_json[0]), end = json_u64(offsets_json[1]);
    if (!begin || !end)
      WICK_SAFETENSORS_FAIL("tensor \"", name, "\": data_offsets ", offsets_json.dump(),
                            " are not non-negative integers");
    if (*end < *begin)
      WICK_SAFETENSORS_FAIL("tensor \"", name, "\": data_offsets ", offsets_json.dump(), " end before they begin");
    if (*end > data_bytes)
      WICK_SAFETENSORS_FAIL("tensor \"", name, "\": data_offsets ", offsets_json.dump(),
                            " run past the end of the data section (", data_bytes, " bytes)");
    if (*end - *begin != n_bytes)
      WICK_SAFETENSORS_FAIL("tensor \"", name, "\": data_offsets ", offsets_json.dump(), " hold ", *end - *begin,
                            " bytes but ", info.dtype, " ", info.shape, " needs ", n_bytes);
    info.begin = *begin;
    info.end = *end;
    info.file_offset = data_start + *begin;
    file.entries_[name] = std::move(info);
  }

  // Like the reference implementation: sorted by offsets, the tensors must tile the data section
  // exactly, with no overlap, no gap and no trailing bytes.
  std::vector<std::pair<std::string, const SafetensorsInfo*>> sorted;
  for (const auto& [name, info] : file.entries_) sorted.emplace_back(name, &info);
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.second->begin, a.second->end) < std::make_pair(b.second->begin, b.second->end);
  });
  uint64_t covered = 0;
  std::string previous = "(start of data)";
  for (const auto& [name, info] : sorted) {
    if (info->begin < covered)
      WICK_SAFETENSORS_FAIL("tensor \"", name, "\" (bytes ", info->begin, "..", info->end, ") overlaps tensor \"",
                            previous, "\"");
    if (info->begin > covered)
      WICK_SAFETENSORS_FAIL("gap of ", info->begin - covered, " bytes before tensor \"", name,
                            "\" (holes between tensors are not allowed)");
    covered = info->end;
    previous = name;
    file.names_.push_back(name);
  }
  if (covered != data_bytes)
    WICK_SAFETENSORS_FAIL("data section has ", data_bytes, " bytes but the tensors cover ", covered,
                          " (trailing bytes are not allowed)");
  return file;
}

const SafetensorsInfo& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    const std::string& path = path_;
    WICK_SAFETENSORS_FAIL("no tensor named \"", name, "\" (the file has ", entries_.size(), " tensors)");
  }
  return it->second;
}

const SafetensorsInfo& SafetensorsFile::info(const std::string& name) const { return entry(name); }

const uint8_t* SafetensorsFile::mapped_data() const { return mapping_->data(); }
uint64_t SafetensorsFile::mapped_bytes() const { return mapping_->size(); }

Tensor SafetensorsFile::raw_bytes(const std::string& name) const {
  const SafetensorsInfo& info = entry(name);
  uint64_t n_bytes = info.end - info.begin;
  auto storage = Storage::wrap(mapping_->data() + info.file_offset, n_bytes, Device::cpu(),
                               mapping_);
  Shape shape{static_cast<int64_t>(n_bytes)};
  return Tensor::from_storage(std::move(storage), shape, contiguous_strides(shape), 0, DType::U8);
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const SafetensorsInfo& info = entry(name);
  Shape shape = info.shape;
  DType dtype = DType::U8;
  if (info.wick_dtype) {
    dtype = *info.wick_dtype;
  } else if (info.element_bits % 8 == 0) {
    shape.push_back(info.element_bits / 8);
  } else {
    shape = {static_cast<int64_t>(info.end - info.begin)};
  }
  uint8_t* at = mapping_->data() + info.file_offset;
  size_t n_bytes = static_cast<size_t>(info.end - info.begin);
  if (reinterpret_cast<uintptr_t>(at) % dtype_size(dtype) != 0) {
    // Misaligned data (legal in the format, never written by the reference writer): copy.
    Tensor copy = Tensor::empty(shape, dtype, Device::cpu());
    std::memcpy(copy.data(), at, n_bytes);
    return copy;
  }
  auto storage = Storage::wrap(at, n_bytes, Device::cpu(), mapping_);
  return Tensor::from_storage(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

#undef WICK_SAFETENSORS_FAIL

// ---- writing ----

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I8: return "I8";
    default: return "U8";
  }
}

namespace {

std::string json_string(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json(text).dump();
  } catch (const nlohmann::json::exception& e) {
    WICK_FAIL(Usage, "save_safetensors: ", path, ": string is not valid UTF-8: ", e.what());
  }
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata,
                      const std::function<void(const void* data, size_t bytes)>& observe) {
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    WICK_CHECK(name != "__metadata__", "save_safetensors: ", path, ": \"__metadata__\" is not a tensor name");
    WICK_CHECK(seen.insert(name).second, "save_safetensors: ", path, ": tensor name \"", name, "\" appears twice");
    WICK_CHECK(tensor.defined(), "save_safetensors: ", path, ": tensor \"", name, "\" is undefined");
  }
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto rank = [](DType d) { return find_format_dtype(safetensors_dtype_name(d))->rank; };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    int rank_a = rank(tensors[a].second.dtype()), rank_b = rank(tensors[b].second.dtype());
    if (rank_a != rank_b) return rank_a > rank_b;
    return tensors[a].first < tensors[b].first;
  });

  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ',';
      header += json_string(key, path);
      header += ':';
      header += json_string(value, path);
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& [name, tensor] = tensors[order[k]];
    if (header.size() > 1) header += ",";
    header += json_string(name, path);
    header += ":{\"dtype\":\"";
    header += safetensors_dtype_name(tensor.dtype());
    header += "\",\"shape\":[";
    for (size_t axis = 0; axis < tensor.shape().size(); ++axis) {
      if (axis) header += ',';
      header += std::to_string(tensor.shape()[axis]);
    }
    uint64_t end = offset + tensor.nbytes();
    header += "],\"data_offsets\":[";
    header += std::to_string(offset);
    header += ',';
    header += std::to_string(end);
    header += "]}";
    offset = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  // The 8-byte length and the header: the file's first bytes.
  auto head = std::make_shared<std::string>(8, '\0');
  for (int i = 0; i < 8; ++i) (*head)[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  *head += header;

  // Written through <path>.tmp-<pid>, fsynced, renamed (runtime/atomic_file.h). The observer sees
  // each range while it is being written, and the end of the file during the fsync.
  AtomicFile out(path);
  std::optional<ByteObserverThread> observer;
  try {
    if (observe) observer.emplace(observe);
    if (observer) observer->push(head, head->data(), head->size(), false);
    out.write(head->data(), head->size());
    for (size_t index : order) {
      const Tensor& tensor = tensors[index].second;
      auto host = std::make_shared<Tensor>(tensor.to(Device::cpu()).contiguous());
      const bool copy = !(tensor.device().is_cpu() && tensor.is_contiguous());
      if (observer) observer->push(host, host->data(), host->nbytes(), copy);
      out.write(host->data(), host->nbytes());
    }
    out.sync();
    if (observer) observer->finish();
  } catch (...) {
    observer.reset();
    throw;  // `out` removes the temporary
  }
  out.commit();
}

}  // namespace wick
