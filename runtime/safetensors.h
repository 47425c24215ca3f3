// Reading and writing .safetensors files (CPU). Reading maps the file and never copies aligned data.
//
//   SafetensorsFile file = SafetensorsFile::open("model.safetensors");
//   for (const std::string& name : file.names()) { const SafetensorsInfo& i = file.info(name); ... }
//   Tensor w = file.get("blocks.0.attn.qkv.weight");   // zero-copy view into the mapping
//   save_safetensors("out.safetensors", {{"w", w}, {"b", b}}, {{"format", "pt"}});
//
// Format: u64 little-endian header length N, N bytes of JSON, then the data section. See
// docs/safetensors.md for the dtype mapping, the raw-byte representation of types wick has no
// DType for (I16, U16, U32, U64, C64, F8_*, F4, F6_*) and the validation rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/mapped_file.h"
#include "runtime/tensor.h"

namespace wick {

struct SafetensorsInfo {
  std::string dtype;               // the format's dtype string: "F32", "BF16", "F8_E4M3", ...
  Shape shape;                     // as stored in the file
  uint64_t begin = 0, end = 0;     // byte range relative to the start of the data section
  uint64_t file_offset = 0;        // absolute file offset of byte `begin`
  std::optional<DType> wick_dtype;  // the DType get() returns; nullopt for raw-byte types
  int element_bits = 0;            // 4, 6, 8, 16, 32 or 64
};

class SafetensorsFile {
 public:
  // Maps `path` copy-on-write (MAP_PRIVATE) and validates the whole header; throws WickError (Data)
  // naming the file and the problem.
  static SafetensorsFile open(const std::string& path);
  // The same over a file already mapped (e.g. one whose bytes were just hashed: MappedFile). Tensors
  // of every SafetensorsFile opened on one mapping share its memory.
  static SafetensorsFile open(std::shared_ptr<MappedFile> file);

  const std::string& path() const { return path_; }
  // Tensor names in data-offset order (the order of their bytes in the file).
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Throws WickError (Data) when there is no tensor `name`.
  const SafetensorsInfo& info(const std::string& name) const;

  // The tensor as a contiguous CPU tensor. Zero-copy (a view of the private mapping, which lives
  // while the tensor does) when the data is aligned to the element size; a copy otherwise.
  // F64 F32 F16 BF16 I64 I32 I8 U8 load as that DType; BOOL loads as U8 (0/1 as stored); types
  // without a DType load as U8 bytes: shape [*shape, element_bytes] for whole-byte types,
  // [n_bytes] for the sub-byte F4/F6 types. The mapping is copy-on-write: writing through a
  // zero-copy tensor (training a loaded weight in place) changes memory, never the file.
  Tensor get(const std::string& name) const;
  // The tensor's bytes as a 1-d U8 view of the mapping, whatever its dtype (always zero-copy).
  Tensor raw_bytes(const std::string& name) const;

  // The mapped file, for zero-copy checks.
  const uint8_t* mapped_data() const;
  uint64_t mapped_bytes() const;

 private:
  SafetensorsFile() = default;
  const SafetensorsInfo& entry(const std::string& name) const;

  std::string path_;
  std::shared_ptr<MappedFile> mapping_;
  std::vector<std::string> names_;
  std::map<std::string, SafetensorsInfo> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (any device, any strides; copied to contiguous CPU memory one at a time) in the
// Python safetensors package's layout: entries sorted by dtype (its alignment order: U64 I64 F64
// F32 I32 BF16 F16 I8 U8, largest first) then by name, data packed with no gaps, header JSON compact
// and space-padded to a multiple of 8 bytes. Metadata keys are written in sorted order. Writes
// `path.tmp-<pid>`, fsyncs it and renames it over `path` (AtomicFile, runtime/atomic_file.h): a failed
// write (full disk, I/O error) is a WickError (Data) naming the file, and removes the temporary.
// Names must be unique and not "__metadata__".
// `observe` (optional) receives every byte of the file, in file order, on a helper thread while the
// writing and the fsync go on (to hash the file in the same pass: engine/checkpoint/sha256.h); it
// has seen the whole file when save_safetensors returns. An exception it throws fails the save.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      const std::function<void(const void* data, size_t bytes)>& observe = {});

// The format's dtype string for a wick DType ("F32", "BF16", ...).
const char* safetensors_dtype_name(DType dtype);

}  // namespace wick
