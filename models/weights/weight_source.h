// A set of named tensors read from safetensors files: one file, a sharded folder with an index, or
// a diffusers pipeline folder's component subfolder. Reading never copies (the files are mapped).
//
//   WeightSource source = WeightSource::open("FLUX.1-dev", "transformer");   // pipeline folder
//   for (const std::string& name : source.names()) { const SafetensorsInfo& i = source.info(name); ... }
//   Tensor w = source.get("transformer_blocks.0.attn.to_q.weight");          // view of a shard's mapping
//
// What `path` may be (checked in this order):
//   * a file: a .safetensors file, or a "*.safetensors.index.json" index (shards beside it);
//   * a folder holding one "*.safetensors.index.json" (diffusers/transformers sharding: the index's
//     "weight_map" names each tensor's shard file, relative to the folder);
//   * a folder holding one "*.safetensors" file;
//   * a folder whose subfolder `subfolder_hint` ("transformer", "unet", ...) is one of the above.
// Errors are WickError (Data) naming the file: a missing path, an unreadable index, a shard named by
// the index that is absent, a tensor the index lists but its shard lacks, a tensor held by two
// shards (or by a shard the index does not name for it), two indexes or several files in a folder.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/safetensors.h"

namespace wick {

class WeightSource {
 public:
  static WeightSource open(const std::string& path, const std::string& subfolder_hint = "");
  // One opened file as a source (tests, and callers that already hold the file).
  static WeightSource from_file(SafetensorsFile file);

  // The file or index that was opened (after following the subfolder hint).
  const std::string& path() const { return path_; }
  // The safetensors files opened, in the order they were opened (the index's shards sorted by name).
  std::vector<std::string> files() const;
  // Tensor names, sorted (std::string order), whatever file holds them.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return owner_.count(name) != 0; }
  // dtype, shape and byte range of a tensor; throws WickError (Data) naming the source when absent.
  const SafetensorsInfo& info(const std::string& name) const;
  // The tensor as SafetensorsFile::get returns it: a zero-copy CPU view of its file's mapping, which
  // stays mapped while the tensor (or this source) lives.
  Tensor get(const std::string& name) const;
  // The opened file holding `name` (for zero-copy checks: mapped_data(), mapped_bytes()).
  const SafetensorsFile& file_of(const std::string& name) const;

 private:
  WeightSource() = default;
  size_t index_of(const std::string& name) const;

  std::string path_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> owner_;  // tensor name -> index into files_
  std::vector<std::string> names_;
};

}  // namespace wick
