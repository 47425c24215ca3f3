// The order in which ranks see samples: a deterministic per-epoch shuffle from the seed (Philox,
// integer arithmetic: the same on every machine), bucket-pure batches, a strided slice per rank,
// padding by wrapping (docs/dataset.md "Reading in training").
//
//   DistributedSampler sampler(ids, buckets, {.seed = 42, .rank = r, .world = w, .batch_size = 16});
//   std::vector<int64_t> batch;
//   while (sampler.next(batch)) { ... }          // runs forever, epoch after epoch
//   SamplerState saved = sampler.state();        // {epoch, position}; restore with load_state
//
// With .global_batch_size = G the global batches hold G ids whatever the world size (the same
// global batches, in the same order, on any number of ranks); rank r takes rank_share(G, r, w) of
// them: floor(G / w) or ceil(G / w).
//
// With regularization ids (a second constructor), every global batch is the global batch of `ids`
// followed by one of the regularization ids (reg_per_batch x world of them, or reg_per_batch with a
// global_batch_size), each rank taking its strided slice of the whole: its training ids first, then its
// regularization ids (reg_count() of them; with a global batch that does not divide evenly, a rank may have
// one more or one fewer of either). An epoch is a pass over `ids`; the regularization ids cycle through
// their own shuffled epochs, their position following from the state alone, so both orders are the same
// on any number of ranks for a given global batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace wick {

struct SamplerOptions {
  uint64_t seed = 0;
  int rank = 0;
  int world = 1;
  int64_t batch_size = 1;         // per rank (when global_batch_size is 0)
  int64_t global_batch_size = 0;  // ids per global batch over all ranks; 0 = world * batch_size
  int64_t reg_per_batch = 0;      // regularization ids per rank, of batch_size; with global_batch_size,
                                  // per global batch, of it (needs the second constructor)
};

// Ids of a global batch of `global` that rank `rank` of `world` takes (its strided slice: positions
// rank, rank + world, ...): ceil(global / world) for the first global % world ranks, floor for the
// rest.
int64_t rank_share(int64_t global, int rank, int world);

struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;  // global batches already consumed in this epoch
  bool operator==(const SamplerState& other) const { return epoch == other.epoch && position == other.position; }
};

class DistributedSampler {
 public:
  // ids: the eligible sample ids; bucket_of[i]: the bucket of ids[i] (any integer key). ids non-empty.
  DistributedSampler(std::vector<int64_t> ids, std::vector<int64_t> bucket_of, const SamplerOptions& options);
  // Mixes regularization ids into every batch: options.reg_per_batch in [1, batch_size - 1] (with a
  // global_batch_size G: [1, G - 1], and G - reg_per_batch >= world), reg_ids non-empty, and every id of
  // both sets in one bucket (a Config error otherwise).
  DistributedSampler(std::vector<int64_t> ids, std::vector<int64_t> bucket_of, std::vector<int64_t> reg_ids,
                     std::vector<int64_t> reg_bucket_of, const SamplerOptions& options);

  const SamplerOptions& options() const { return options_; }
  // Training ids per global batch (global_batch_size, or world * batch_size; less the regularization
  // ids with them).
  int64_t global_batch() const { return global_; }
  // Ids per batch of this rank: rank_share(global_batch() + regularization ids, rank, world).
  int64_t rank_batch_size() const { return rank_share(global_ + reg_global_, options_.rank, options_.world); }
  // How many of them are regularization ids (at the end of every rank batch); 0 without.
  int64_t reg_count() const { return rank_batch_size() - rank_share(global_, options_.rank, options_.world); }
  // Batches per epoch, the same on every rank.
  int64_t batches_per_epoch() const;
  // Global order of an epoch of `ids`: batches_per_epoch() global batches of global_batch() ids each.
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // This rank's batch `index` of `epoch`: positions rank, rank + world, ... of that global batch (with
  // regularization ids: of it followed by the regularization global batch of the same running number).
  std::vector<int64_t> rank_batch(int64_t epoch, int64_t index) const;

  // Writes the next batch of this rank and advances (to the next epoch at the end). Always true.
  bool next(std::vector<int64_t>& batch);
  SamplerState state() const { return state_; }
  void load_state(const SamplerState& state);

 private:
  const std::vector<int64_t>& cached_order(int64_t epoch) const;

  std::vector<int64_t> ids_, bucket_of_;
  SamplerOptions options_;
  // The regularization ids' sampler (null without), one rank of one: its batches are whole global
  // regularization batches. Copies of this sampler share it and its order cache: like one sampler, use
  // them from one thread at a time.
  std::shared_ptr<const DistributedSampler> reg_;
  int64_t reg_global_ = 0;  // regularization ids per global batch
  SamplerState state_;
  int64_t global_ = 0;
  int64_t n_batches_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_;
};

}  // namespace wick
