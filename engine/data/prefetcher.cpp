#include "engine/data/prefetcher.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/cuda/cuda_api.h"
#include "runtime/memory.h"

namespace wick {

Prefetcher::Prefetcher(std::shared_ptr<const LatentDataset> dataset, DistributedSampler sampler,
                       const PrefetchOptions& options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  WICK_CHECK(dataset_ != nullptr, "Prefetcher: no dataset");
  WICK_CHECK(options_.depth >= 2, "Prefetcher: depth must be at least 2, got ", options_.depth);
  consumed_ = sampler_.state();
  if (options_.device.is_cuda()) {
    copy_stream_ = create_stream(options_.device);
    own_stream_ = true;
  }
  thread_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (own_stream_) destroy_stream(copy_stream_);
}

void Prefetcher::run() {
  try {
    if (options_.device.is_cuda()) cuda::set_device(options_.device.index);
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return stop_ || static_cast<int>(queue_.size()) < options_.depth; });
        if (stop_) return;
      }
      std::vector<int64_t> ids;
      sampler_.next(ids);
      Batch batch = load(ids, sampler_.state());
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(std::move(batch));
      }
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    changed_.notify_all();
  }
}

Batch Prefetcher::load(const std::vector<int64_t>& ids, const SamplerState& after) {
  const LatentDataset& ds = *dataset_;
  const BucketInfo& bucket = ds.buckets()[static_cast<size_t>(ds.bucket_of(ids[0]))];
  int64_t B = static_cast<int64_t>(ids.size()), C = ds.attributes().latent_channels;
  int64_t L = ds.text_length(), D = ds.text_dim(), P = ds.pooled_dim();
  Shape latents_shape = {B, C, bucket.height, bucket.width}, embeds_shape = {B, L, D}, pooled_shape = {B, P},
        mask_shape = {B, L};
  const bool logvar = ds.has_logvar();
  Batch batch;
  batch.ids = ids;
  batch.after = after;
  if (const int64_t n_reg = sampler_.reg_count(); n_reg > 0) {
    WICK_CHECK(n_reg < B, "Prefetcher: a batch of ", B, " samples with ", n_reg, " regularization samples");
    batch.is_reg.assign(static_cast<size_t>(B), 0);
    std::fill(batch.is_reg.end() - n_reg, batch.is_reg.end(), uint8_t{1});
  }
  batch.labels = Tensor::empty({B}, DType::I64);
  if (ds.has_original_size()) batch.original_size = Tensor::empty({B, 2}, DType::I64);
  if (ds.has_crop()) batch.crop = Tensor::empty({B, 2}, DType::I64);
  if (ds.has_flipped()) batch.flipped = Tensor::empty({B}, DType::U8);
  auto pointer = [](const Tensor& t) { return t.defined() ? t.data() : nullptr; };
  SampleBuffers buffers{.labels = batch.labels.data_as<int64_t>(),
                        .original_size = static_cast<int64_t*>(pointer(batch.original_size)),
                        .crop = static_cast<int64_t*>(pointer(batch.crop)),
                        .flipped = static_cast<uint8_t*>(pointer(batch.flipped)),
                        .captions = &batch.captions,
                        .sources = &batch.sources};
  if (options_.device.is_cpu()) {
    batch.latents = Tensor::empty(latents_shape, DType::F32);
    if (logvar) batch.latents_logvar = Tensor::empty(latents_shape, DType::F32);
    batch.text_embeds = Tensor::empty(embeds_shape, DType::F32);
    batch.text_pooled = Tensor::empty(pooled_shape, DType::F32);
    batch.text_mask = Tensor::empty(mask_shape, DType::U8);
    buffers.latents = batch.latents.data_as<float>();
    buffers.latents_logvar = static_cast<float*>(pointer(batch.latents_logvar));
    buffers.text_embeds = batch.text_embeds.data_as<float>();
    buffers.text_pooled = batch.text_pooled.data_as<float>();
    buffers.text_mask = static_cast<uint8_t*>(batch.text_mask.data());
    ds.read_into(ids, buffers);
    return batch;
  }
  // CUDA: convert into one pinned staging buffer, copy each part asynchronously on the loader's own
  // stream, and wait for that stream (not the training stream) before handing the batch over.
  size_t n_latents = static_cast<size_t>(numel(latents_shape)), n_embeds = static_cast<size_t>(numel(embeds_shape)),
         n_pooled = static_cast<size_t>(numel(pooled_shape)), n_mask = static_cast<size_t>(numel(mask_shape));
  size_t n_logvar = logvar ? n_latents : 0;
  size_t floats = n_latents + n_logvar + n_embeds + n_pooled;
  size_t bytes = floats * sizeof(float) + n_mask;
  static thread_local PinnedBuffer staging;
  if (staging.bytes() < bytes) staging = PinnedBuffer(bytes);
  float* host = static_cast<float*>(staging.data());
  float* host_logvar = host + n_latents;
  float* host_embeds = host_logvar + n_logvar;
  float* host_pooled = host_embeds + n_embeds;
  uint8_t* host_mask = reinterpret_cast<uint8_t*>(host + floats);
  buffers.latents = host;
  buffers.latents_logvar = logvar ? host_logvar : nullptr;
  buffers.text_embeds = host_embeds;
  buffers.text_pooled = host_pooled;
  buffers.text_mask = host_mask;
  ds.read_into(ids, buffers);
  StreamGuard guard(copy_stream_);  // device tensors are allocated in the copy stream's order
  Device device = options_.device;
  batch.latents = Tensor::empty(latents_shape, DType::F32, device);
  batch.text_embeds = Tensor::empty(embeds_shape, DType::F32, device);
  batch.text_pooled = Tensor::empty(pooled_shape, DType::F32, device);
  batch.text_mask = Tensor::empty(mask_shape, DType::U8, device);
  copy_bytes(batch.latents.data(), device, host, Device::cpu(), n_latents * sizeof(float), copy_stream_);
  if (logvar) {
    batch.latents_logvar = Tensor::empty(latents_shape, DType::F32, device);
    copy_bytes(batch.latents_logvar.data(), device, host_logvar, Device::cpu(), n_logvar * sizeof(float),
               copy_stream_);
  }
  copy_bytes(batch.text_embeds.data(), device, host_embeds, Device::cpu(), n_embeds * sizeof(float), copy_stream_);
  copy_bytes(batch.text_pooled.data(), device, host_pooled, Device::cpu(), n_pooled * sizeof(float), copy_stream_);
  copy_bytes(batch.text_mask.data(), device, host_mask, Device::cpu(), n_mask, copy_stream_);
  synchronize(copy_stream_);  // the staging buffer is reused by the next batch
  return batch;
}

Batch Prefetcher::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !queue_.empty() || error_ != nullptr; });
  if (queue_.empty()) std::rethrow_exception(error_);
  Batch batch = std::move(queue_.front());
  queue_.pop_front();
  consumed_ = batch.after;
  lock.unlock();
  changed_.notify_all();
  return batch;
}

SamplerState Prefetcher::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return consumed_;
}

int Prefetcher::ready() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(queue_.size());
}

int64_t batch_epoch(const Batch& batch) {
  return batch.after.position == 0 ? batch.after.epoch - 1 : batch.after.epoch;
}

Batch slice_batch(const Batch& batch, int64_t begin, int64_t count) {
  const int64_t n = static_cast<int64_t>(batch.ids.size());
  WICK_CHECK(begin >= 0 && count >= 1 && begin + count <= n, "slice_batch: samples [", begin, ", ", begin + count,
             ") of a batch of ", n);
  auto cut = [&](const Tensor& t) { return t.defined() ? t.narrow(0, begin, count) : Tensor(); };
  auto part = [&](const auto& values) {
    using Values = std::decay_t<decltype(values)>;
    if (static_cast<int64_t>(values.size()) != n) return values;  // empty: the file has none
    return Values(values.begin() + begin, values.begin() + begin + count);
  };
  Batch out;
  out.latents = cut(batch.latents);
  out.latents_logvar = cut(batch.latents_logvar);
  out.text_embeds = cut(batch.text_embeds);
  out.text_pooled = cut(batch.text_pooled);
  out.text_mask = cut(batch.text_mask);
  out.labels = cut(batch.labels);
  out.original_size = cut(batch.original_size);
  out.crop = cut(batch.crop);
  out.flipped = cut(batch.flipped);
  out.sources = part(batch.sources);
  out.ids = part(batch.ids);
  out.captions = part(batch.captions);
  out.is_reg = part(batch.is_reg);
  out.after = batch.after;
  return out;
}

}  // namespace wick
