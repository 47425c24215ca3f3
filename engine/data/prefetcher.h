// Background batch loading: a thread that reads the sampler's next batches from a LatentDataset
// (with every optional member the file holds), converts f16 to f32 and keeps `depth` (>= 2) batches ready; on a CUDA target it converts into a
// pinned host buffer and copies to the device asynchronously on its own stream.
//
//   auto ds = LatentDataset::open(path);
//   DistributedSampler sampler(ids, buckets, {.seed = 1, .rank = r, .world = w, .batch_size = 16});
//   Prefetcher loader(ds, std::move(sampler), {.depth = 2, .device = Device::cuda(0)});
//   Batch b = loader.next();                      // blocks until a batch is ready
//   SamplerState s = loader.state();              // position after b, for checkpoints
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/data/distributed_sampler.h"
#include "engine/data/latent_dataset.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace wick {

struct Batch {
  Tensor latents;         // f32 [B, C, H, W]: the cached latent, or the VAE's mean when latents_logvar is defined
  Tensor latents_logvar;  // f32 [B, C, H, W] on the target device; undefined when the file has none
  Tensor text_embeds;     // f32 [B, L, D]
  Tensor text_pooled;     // f32 [B, P]
  Tensor text_mask;       // u8 [B, L]
  Tensor labels;          // i64 [B] (-1 where the file has no labels); always on the CPU
  // SDXL's micro-conditioning and provenance, on the CPU; undefined / empty when the file has none.
  Tensor original_size;   // i64 [B, 2] (height, width)
  Tensor crop;            // i64 [B, 2] (top, left)
  Tensor flipped;         // u8 [B]
  std::vector<std::string> sources;
  std::vector<int64_t> ids;
  std::vector<std::string> captions;
  // 1 for a regularization sample (the sampler's regularization ids: DistributedSampler::reg_count() at the
  // end of the batch), 0 for a training one; empty when the run has no regularization data.
  std::vector<uint8_t> is_reg;
  SamplerState after;  // sampler state once this batch is consumed
};

// The epoch a batch was drawn from (Batch::after is the state after it, possibly the next epoch's start).
int64_t batch_epoch(const Batch& batch);

// Samples [begin, begin + count) of `batch`: every defined tensor narrowed along its first (batch)
// dimension (views, on the batch's device), ids, captions, sources and is_reg cut alike, `after` kept. How
// a rank's share of a global batch is trained in several micro-batches (automatic accumulation).
Batch slice_batch(const Batch& batch, int64_t begin, int64_t count);

struct PrefetchOptions {
  int depth = 2;                  // batches kept ready (at least 2)
  Device device = Device::cpu();  // where latents, embeds, pooled and mask are placed
};

class Prefetcher {
 public:
  Prefetcher(std::shared_ptr<const LatentDataset> dataset, DistributedSampler sampler,
             const PrefetchOptions& options = {});
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next batch in sampler order; rethrows an error raised by the loading thread.
  Batch next();
  // The sampler state after the last batch returned by next() (the initial state before any).
  SamplerState state() const;
  // Batches loaded and waiting (for tests and the progress display).
  int ready() const;

 private:
  void run();
  Batch load(const std::vector<int64_t>& ids, const SamplerState& after);

  std::shared_ptr<const LatentDataset> dataset_;
  DistributedSampler sampler_;
  PrefetchOptions options_;
  SamplerState consumed_;
  Stream copy_stream_;
  bool own_stream_ = false;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace wick
