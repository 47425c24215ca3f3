// Data loader throughput: samples/s that the Prefetcher delivers from a packed Fashion-MNIST file
// (f16 -> f32, per-sample chunk reads), for a few batch sizes. The trainer's consumption is
// measured by the trainer benchmark; the loader must stay well ahead of it.
//
//   build/bench/dataset_bench [FILE] [--batches N]   (FILE defaults to a fresh 10,000-sample pack)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "engine/data/distributed_sampler.h"
#include "engine/data/fashion_pack.h"
#include "engine/data/latent_dataset.h"
#include "engine/data/prefetcher.h"

int main(int argc, char** argv) {
  using namespace wick;
  std::string path;
  int64_t n_batches = 200;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--batches" && i + 1 < argc) n_batches = std::atoll(argv[++i]);
    else path = arg;
  }
  if (path.empty()) {
    path = (std::filesystem::temp_directory_path() / "wick_dataset_bench.h5").string();
    PackSummary pack = pack_fashion_mnist({.out = path, .split = "train", .limit = 10000, .force = true,
                                          .progress = false});
    std::printf("packed %lld samples in %.2fs (%.0f samples/s)\n", static_cast<long long>(pack.n_samples),
                pack.seconds, pack.n_samples / pack.seconds);
  }
  auto dataset = LatentDataset::open(path);
  std::vector<int64_t> ids = select_ids(*dataset, {});
  std::vector<int64_t> buckets;
  for (int64_t id : ids) buckets.push_back(dataset->bucket_of(id));
  std::printf("%s: %lld samples\n", path.c_str(), static_cast<long long>(ids.size()));
  std::printf("%-8s %-8s %12s %12s\n", "batch", "batches", "samples/s", "ms/batch");
  for (int64_t batch_size : {16, 64, 256}) {
    Prefetcher loader(dataset, DistributedSampler(ids, buckets, {.seed = 1, .batch_size = batch_size}), {.depth = 2});
    loader.next();  // warm-up
    auto start = std::chrono::steady_clock::now();
    for (int64_t b = 0; b < n_batches; ++b) loader.next();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-8lld %-8lld %12.0f %12.3f\n", static_cast<long long>(batch_size), static_cast<long long>(n_batches),
                n_batches * batch_size / seconds, seconds * 1000.0 / n_batches);
  }
  return 0;
}
