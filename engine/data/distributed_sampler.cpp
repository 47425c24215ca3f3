#include "engine/data/distributed_sampler.h"

#include <algorithm>
#include <map>

#include "runtime/error.h"
#include "runtime/philox.h"

namespace wick {
namespace {

// Word i of a Philox stream (raw 32 bits).
uint32_t stream_word(const RngStream& stream, uint64_t i) { return stream_block(stream, i >> 2).word[i & 3]; }

// A uniform integer in [0, n) from two stream words (64 random bits, multiply-shift: bias < n / 2^64).
uint64_t below(const RngStream& stream, uint64_t draw, uint64_t n) {
  uint64_t bits = (static_cast<uint64_t>(stream_word(stream, 2 * draw)) << 32) | stream_word(stream, 2 * draw + 1);
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

// Fisher–Yates from the back: swap element i with a uniform j in [0, i].
template <typename T>
void shuffle(std::vector<T>& values, const RngStream& stream) {
  for (size_t i = values.size(); i > 1; --i) {
    uint64_t j = below(stream, values.size() - i, i);
    std::swap(values[i - 1], values[j]);
  }
}

}  // namespace

int64_t rank_share(int64_t global, int rank, int world) {
  WICK_CHECK(world >= 1 && rank >= 0 && rank < world && global >= 0, "rank_share: rank ", rank, " of world ", world,
             ", global batch ", global);
  return global / world + (rank < global % world ? 1 : 0);
}

DistributedSampler::DistributedSampler(std::vector<int64_t> ids, std::vector<int64_t> bucket_of,
                                       const SamplerOptions& options)
    : ids_(std::move(ids)), bucket_of_(std::move(bucket_of)), options_(options) {
  WICK_CHECK_KIND(Data, !ids_.empty(), "DistributedSampler: no samples to draw from (empty dataset or class filter)");
  WICK_CHECK(ids_.size() == bucket_of_.size(), "DistributedSampler: ", ids_.size(), " ids but ", bucket_of_.size(),
             " bucket numbers");
  WICK_CHECK(options.world >= 1 && options.rank >= 0 && options.rank < options.world,
             "DistributedSampler: rank ", options.rank, " of world ", options.world);
  WICK_CHECK(options.batch_size >= 1, "DistributedSampler: batch_size ", options.batch_size);
  WICK_CHECK(options.reg_per_batch == 0, "DistributedSampler: reg_per_batch ", options.reg_per_batch,
             " without regularization ids");
  WICK_CHECK(options.global_batch_size >= 0, "DistributedSampler: global_batch_size ", options.global_batch_size);
  global_ = options.global_batch_size > 0 ? options.global_batch_size : options.world * options.batch_size;
  WICK_CHECK_KIND(Config, global_ >= options.world, "DistributedSampler: a global batch of ", global_,
                  " cannot give each of ", options.world, " ranks a sample");
  std::map<int64_t, int64_t> per_bucket;
  for (int64_t b : bucket_of_) ++per_bucket[b];
  for (const auto& [bucket, count] : per_bucket) n_batches_ += (count + global_ - 1) / global_;
}

namespace {

// Training ids per global batch beside options.reg_per_batch regularization ids (per rank, or per global
// batch with global_batch_size); checked here, before the training sampler is built from it.
int64_t training_global_batch(const SamplerOptions& options) {
  const bool global = options.global_batch_size > 0;
  const int64_t batch = global ? options.global_batch_size : options.batch_size;
  WICK_CHECK(options.world >= 1 && options.reg_per_batch >= 1 && options.reg_per_batch < batch, "DistributedSampler: ",
             options.reg_per_batch, " regularization ids in batches of ", batch);
  const int64_t training = global ? batch - options.reg_per_batch : options.world * (batch - options.reg_per_batch);
  WICK_CHECK_KIND(Config, training >= options.world, "train.global_batch_size ", batch, " with ",
                  options.reg_per_batch, " regularization samples (train.reg_ratio) leaves ", training,
                  " training samples per global batch, fewer than the ", options.world,
                  " ranks: every rank needs at least one (a larger global batch or a smaller reg_ratio)");
  return training;
}

}  // namespace

DistributedSampler::DistributedSampler(std::vector<int64_t> ids, std::vector<int64_t> bucket_of,
                                       std::vector<int64_t> reg_ids, std::vector<int64_t> reg_bucket_of,
                                       const SamplerOptions& options)
    : DistributedSampler(std::move(ids), std::move(bucket_of),
                         SamplerOptions{.seed = options.seed, .rank = options.rank, .world = options.world,
                                        .global_batch_size = training_global_batch(options)}) {
  WICK_CHECK_KIND(Data, !reg_ids.empty(), "DistributedSampler: no regularization samples (empty class filter?)");
  for (const std::vector<int64_t>* buckets : {&bucket_of_, &reg_bucket_of})
    for (int64_t b : *buckets)
      WICK_CHECK_KIND(Config, b == bucket_of_.front(), "regularization data needs every training and "
                      "regularization sample in one latent size (bucket), but buckets ", bucket_of_.front(), " and ",
                      b, " are both present");
  // Its own shuffles: the seed moved by a constant, so that a set sharing ids with `ids` is not
  // shuffled in step with it.
  reg_global_ = options.global_batch_size > 0 ? options.reg_per_batch : options.world * options.reg_per_batch;
  reg_ = std::make_shared<const DistributedSampler>(
      std::move(reg_ids), std::move(reg_bucket_of),
      SamplerOptions{.seed = options.seed + 0x9e3779b97f4a7c15ull, .global_batch_size = reg_global_});
  options_ = options;
}

int64_t DistributedSampler::batches_per_epoch() const { return n_batches_; }

std::vector<int64_t> DistributedSampler::epoch_order(int64_t epoch) const {
  const int64_t global = global_;
  std::map<int64_t, std::vector<int64_t>> groups;  // bucket -> ids, in bucket order
  for (size_t i = 0; i < ids_.size(); ++i) groups[bucket_of_[i]].push_back(ids_[i]);
  std::vector<std::vector<int64_t>> batches;
  for (auto& [bucket, group] : groups) {
    std::sort(group.begin(), group.end());  // independent of the order ids were given in
    shuffle(group, derive_stream(options_.seed, static_cast<uint64_t>(bucket), static_cast<uint64_t>(epoch),
                                 RngPurpose::Shuffle));
    size_t real = group.size();
    for (size_t i = 0; group.size() % static_cast<size_t>(global) != 0; ++i) group.push_back(group[i % real]);
    for (size_t start = 0; start < group.size(); start += static_cast<size_t>(global))
      batches.emplace_back(group.begin() + static_cast<std::ptrdiff_t>(start),
                           group.begin() + static_cast<std::ptrdiff_t>(start) + global);
  }
  // The batch-order stream uses sample_id = 2^63 + bucket count, away from any bucket's stream.
  shuffle(batches, derive_stream(options_.seed, (1ull << 63) + groups.size(), static_cast<uint64_t>(epoch),
                                 RngPurpose::Shuffle));
  std::vector<int64_t> order;
  order.reserve(batches.size() * static_cast<size_t>(global));
  for (const auto& batch : batches) order.insert(order.end(), batch.begin(), batch.end());
  return order;
}

const std::vector<int64_t>& DistributedSampler::cached_order(int64_t epoch) const {
  if (cached_epoch_ != epoch) {
    cached_ = epoch_order(epoch);
    cached_epoch_ = epoch;
  }
  return cached_;
}

std::vector<int64_t> DistributedSampler::rank_batch(int64_t epoch, int64_t index) const {
  WICK_CHECK(index >= 0 && index < n_batches_, "DistributedSampler: batch ", index, " of ", n_batches_);
  const std::vector<int64_t>& order = cached_order(epoch);
  const int64_t global = global_, begin = index * global;
  std::vector<int64_t> batch;
  int64_t k = options_.rank;
  for (; k < global; k += options_.world) batch.push_back(order[static_cast<size_t>(begin + k)]);
  if (reg_) {  // the regularization global batch with the same running number, over the reg set's epochs
    const int64_t served = epoch * n_batches_ + index, reg_batches = reg_->batches_per_epoch();
    std::vector<int64_t> reg = reg_->rank_batch(served / reg_batches, served % reg_batches);
    for (; k < global + reg_global_; k += options_.world) batch.push_back(reg[static_cast<size_t>(k - global)]);
  }
  return batch;
}

bool DistributedSampler::next(std::vector<int64_t>& batch) {
  if (state_.position >= n_batches_) {
    ++state_.epoch;
    state_.position = 0;
  }
  batch = rank_batch(state_.epoch, state_.position);
  ++state_.position;
  return true;
}

void DistributedSampler::load_state(const SamplerState& state) {
  WICK_CHECK_KIND(Data, state.epoch >= 0 && state.position >= 0 && state.position <= n_batches_,
                  "DistributedSampler: cannot resume at epoch ", state.epoch, " position ", state.position, " (",
                  n_batches_, " batches per epoch; did the dataset, filter, batch size or world change?)");
  state_ = state;
}

}  // namespace wick
