// Optimizer state in checkpoints, independent of the world size: one file with every parameter's
// whole state, or N shard files (ZeRO-1, one per rank) that merge back into it and re-split for
// any other number of ranks — by whole 256-element blocks, with no dequantization.
//
//   OptimizerLayout layout = optimizer_layout(*optimizer);
//   save_optimizer_state(dir + "/optimizer.safetensors", optimizer->state_tensors(), layout);   // 1 rank
//
//   std::vector<OptimizerShard> shards =                                   // N ranks (each writes its own)
//       split_optimizer_state(optimizer->state_tensors(), layout, zero_partition(layout.flat_numel, n));
//   save_optimizer_shard(dir + "/" + optimizer_shard_file_name(r, n), shards[r]);
//
//   NamedTensors state = load_optimizer_state(dir);      // either form -> per-parameter tensors
//   optimizer->load_state(state);
//   std::vector<OptimizerShard> mine = reshard_optimizer_state(dir, m);   // resume on m ranks
//   state = load_optimizer_state(CheckpointFiles::verify(dir));   // the verified bytes (checkpoint_files.h)
//
// Per-parameter names are those of Optimizer::state_tensors(): "step" and "<param>.<state>"
// (m, v, m_codes, v_codes, absmax_m, absmax_v, momentum, master). A shard holds, for each
// parameter its flat range touches, the elements [begin, end) of that parameter as 1-d tensors
// with the same names; `begin` is a multiple of 256 and `end` is too unless it is the parameter's
// end, so every 8-bit block (256 codes + its absmax) lies in exactly one shard. Whether a
// parameter has 8-bit state is decided for the whole parameter (layout.eight_bit), never per
// shard. docs/checkpoints.md documents the files and their metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/sha256.h"
#include "engine/optim/flat_optimizers.h"
#include "runtime/shape.h"

namespace wick {

class CheckpointFiles;
class Optimizer;
class SafetensorsFile;

// One parameter's place in the flat optimizer buffers (Optimizer::parameters()).
struct OptimizerParameterLayout {
  std::string name;
  Shape shape;
  int64_t numel = 0;
  int64_t offset = 0;      // first element in the flat buffers, a multiple of 256
  bool eight_bit = false;  // 8-bit state (codes + absmax per 256-element block)
  bool operator==(const OptimizerParameterLayout&) const = default;
};

struct OptimizerLayout {
  std::string optimizer;   // "sgd", "adamw", "adamw8bit"
  int64_t flat_numel = 0;  // elements of the flat buffers, padding included
  std::vector<OptimizerParameterLayout> parameters;  // in flat order
  bool operator==(const OptimizerLayout&) const = default;
  // The entry for `name`, or nullptr.
  const OptimizerParameterLayout* find(const std::string& name) const;
};

OptimizerLayout optimizer_layout(const Optimizer& optimizer);

// A range [begin, end) of the flat buffers.
struct FlatRange {
  int64_t begin = 0, end = 0;
  bool operator==(const FlatRange&) const = default;
};

// The ZeRO-1 partition for `world_size` ranks: every rank owns ceil(n_blocks / world_size) blocks
// of 256 elements (the last rank fewer, possibly none), clamped to flat_numel.
std::vector<FlatRange> zero_partition(int64_t flat_numel, int world_size);

// Elements [begin, end) of one parameter held by a shard.
struct ShardPiece {
  std::string parameter;
  int64_t begin = 0, end = 0;
  bool operator==(const ShardPiece&) const = default;
};

struct OptimizerShard {
  int rank = 0, world_size = 1;
  FlatRange range;           // the flat range this rank owns
  OptimizerLayout layout;    // the whole layout (every shard carries it)
  std::vector<ShardPiece> pieces;
  NamedTensors tensors;      // "step" and, per piece, "<param>.<state>" 1-d slices
  std::string source;        // the file it was read from (for messages), or empty
};

// Cuts the per-parameter state (Optimizer::state_tensors() or load_optimizer_state()) into one
// shard per range. The ranges must be sorted, block-aligned (multiples of 256, the last may end at
// flat_numel) and cover [0, layout.flat_numel) exactly. Slices are copied (contiguous CPU tensors).
std::vector<OptimizerShard> split_optimizer_state(const NamedTensors& state, const OptimizerLayout& layout,
                                                  const std::vector<FlatRange>& ranges);
// Joins shards (any subset order) into the per-parameter state, with the shapes state_tensors()
// gives. Throws WickError (Data) naming the files when layouts or steps disagree, or a parameter's
// elements are missing or held twice.
NamedTensors merge_optimizer_shards(const std::vector<OptimizerShard>& shards);

// A sharded (ZeRO-1) optimizer's own shard: its owned range's state as 1-d CPU copies, in the
// form split_optimizer_state gives (so shards of a sharded run and of a split state are the same).
OptimizerShard local_optimizer_shard(const Optimizer& optimizer, int rank, int world_size);
// Restores a sharded optimizer from its shard (the same layout and range; e.g. one of
// reshard_optimizer_state's): state, step, and the masters of 16-bit parameters, then re-gathers
// the masters on every rank (collective: every rank calls it) and writes them into the parameters.
// Masters of f32 parameters are re-read from the parameters: load the model weights first.
void load_optimizer_shard_into(Optimizer& optimizer, const OptimizerShard& shard);

// "optimizer.rank<R>-of-<N>.safetensors".
std::string optimizer_shard_file_name(int rank, int world_size);
// Writes the shard file (fsynced) and returns its size and SHA-256, hashed while it was written.
FileDigest save_optimizer_shard(const std::string& path, const OptimizerShard& shard);

// The single-file form (optimizer.safetensors): the per-parameter tensors with the layout in the
// metadata. Returns the file's size and SHA-256, hashed while it was written.
FileDigest save_optimizer_state(const std::string& path, const NamedTensors& state, const OptimizerLayout& layout);

// Reads a checkpoint's optimizer state in either form: optimizer.safetensors, or all of
// optimizer.rank<R>-of-<N>.safetensors for R = 0..N-1 (a missing rank is an error naming its file).
// `layout` (optional) receives the layout. From `files` (checkpoint_files.h), a verified set reads
// the bytes it hashed and sees only the files its manifest lists; from a directory, the disk.
NamedTensors load_optimizer_state(const CheckpointFiles& files, OptimizerLayout* layout = nullptr);
NamedTensors load_optimizer_state(const std::string& checkpoint_dir, OptimizerLayout* layout = nullptr);
// The layout recorded in an optimizer file's metadata (either form); throws WickError (Data)
// when the file is not a wick optimizer-state file.
OptimizerLayout read_optimizer_layout(const SafetensorsFile& file);
// The state of a checkpoint re-cut for `world_size` ranks with zero_partition (resume on M ranks).
std::vector<OptimizerShard> reshard_optimizer_state(const CheckpointFiles& files, int world_size);
std::vector<OptimizerShard> reshard_optimizer_state(const std::string& checkpoint_dir, int world_size);

}  // namespace wick
