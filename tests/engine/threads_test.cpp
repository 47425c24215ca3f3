// The std::thread code, driven from several threads at once: the prefetcher read by a second thread (what the
// progress display and the checkpoint writer do) while the training thread takes batches, the byte observer held
// back by its copy limit, parallel_for's job hand-out, and a stop signal handled on another thread than the
// training thread. Each test checks the values; in the ThreadSanitizer build
// (label tsan, tests/sanitizers/tsan_run.sh) a data race or a lock-order inversion in them also fails the run.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/checkpoint/parallel_for.h"
#include "engine/checkpoint/sha256.h"
#include "engine/data/distributed_sampler.h"
#include "engine/data/latent_dataset.h"
#include "engine/data/prefetcher.h"
#include "engine/train/preemption.h"
#include "runtime/byte_observer_thread.h"
#include "runtime/error.h"
#include "tests/test_data.h"

using namespace wick;

namespace {

std::string dataset_fixture() { return wick::testing::test_data_dir() + "/dataset/fixture.h5"; }

}  // namespace

TEST(Threads, PrefetcherReadByAnotherThreadWhileBatchesAreTaken) {
  auto ds = LatentDataset::open(dataset_fixture());
  std::vector<int64_t> ids = select_ids(*ds, {});
  std::vector<int64_t> buckets;
  for (int64_t id : ids) buckets.push_back(ds->bucket_of(id));
  SamplerOptions options{.seed = 5, .rank = 0, .world = 1, .batch_size = 2};
  DistributedSampler reference(ids, buckets, options);
  Prefetcher loader(ds, DistributedSampler(ids, buckets, options), {.depth = 2});
  std::atomic<bool> done{false}, impossible{false};
  std::atomic<int64_t> n_polls{0}, worst_ready{0};
  std::thread observer([&] {  // state() and ready(), as the progress display and a checkpoint save read them
    while (!done.load()) {
      SamplerState state = loader.state();
      int ready = loader.ready();
      if (state.epoch < 0 || ready < 0) impossible.store(true);
      if (ready > worst_ready.load()) worst_ready.store(ready);
      n_polls.fetch_add(1);
      std::this_thread::yield();
    }
  });
  // On a loaded 2-core machine the observer may not be scheduled before 16 small batches are taken (seen in CI):
  // wait for its first poll (bounded) so that its reads overlap the batches being taken.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (n_polls.load() == 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  struct StopObserver {  // an ASSERT that returns early still stops and joins the observer
    std::atomic<bool>& done;
    std::thread& thread;
    ~StopObserver() {
      done.store(true);
      if (thread.joinable()) thread.join();
    }
  } stop_observer{done, observer};
  ASSERT_GT(n_polls.load(), 0) << "the observer thread never ran in 30 s";
  for (int step = 0; step < 16; ++step) {  // crosses epoch boundaries
    std::vector<int64_t> want;
    reference.next(want);
    Batch got = loader.next();
    ASSERT_EQ(got.ids, want) << "step " << step;
    EXPECT_EQ(got.latents.to_vector<float>(), ds->read(want).latents.to_vector<float>()) << "step " << step;
    EXPECT_EQ(loader.state(), reference.state()) << "step " << step;
  }
  done.store(true);
  observer.join();
  EXPECT_FALSE(impossible.load());
  EXPECT_LE(worst_ready.load(), 2);  // never more than depth batches held
}

TEST(Threads, PrefetcherDestroyedWhileItsThreadLoadsOrWaits) {
  auto ds = LatentDataset::open(dataset_fixture());
  std::vector<int64_t> ids = select_ids(*ds, {});
  std::vector<int64_t> buckets;
  for (int64_t id : ids) buckets.push_back(ds->bucket_of(id));
  for (int taken = 0; taken < 6; ++taken) {  // the destructor meets the thread loading, or waiting for room
    Prefetcher loader(ds, DistributedSampler(ids, buckets, {.seed = 6, .rank = 0, .world = 1, .batch_size = 2}),
                      {.depth = 2});
    for (int i = 0; i < taken; ++i) EXPECT_EQ(loader.next().ids.size(), 2u);
  }
}

TEST(Threads, ByteObserverHeldBackByItsCopyLimitSeesEveryByteInOrder) {
  const size_t n_ranges = 200, range_bytes = 4096;
  std::vector<uint8_t> all(n_ranges * range_bytes);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>((i * 131 + i / 7) & 0xff);
  Sha256 streamed;
  size_t observed = 0;  // written by the helper thread only, read after finish()
  {
    ByteObserverThread observer(
        [&](const void* data, size_t bytes) {
          streamed.update(data, bytes);
          observed += bytes;
        },
        /*max_copy_bytes=*/3 * range_bytes);  // push() waits for the helper every few ranges
    for (size_t r = 0; r < n_ranges; ++r) {
      // Every other range is a temporary copy freed by the helper once seen (a GPU tensor's host copy).
      auto copy = std::make_shared<std::vector<uint8_t>>(all.begin() + r * range_bytes,
                                                          all.begin() + (r + 1) * range_bytes);
      const bool temporary = r % 2 == 0;
      const void* data = temporary ? static_cast<const void*>(copy->data()) : &all[r * range_bytes];
      observer.push(temporary ? std::shared_ptr<const void>(copy, copy->data()) : nullptr, data, range_bytes,
                    temporary);
    }
    observer.finish();
  }
  EXPECT_EQ(observed, all.size());
  EXPECT_EQ(streamed.finish().sha256, sha256_hex(all.data(), all.size()));
}

TEST(Threads, ByteObserverErrorReachesTheWriterAndAnAbandonedOneStops) {
  std::vector<uint8_t> bytes(1024, 7);
  {
    ByteObserverThread observer([](const void*, size_t) { throw std::runtime_error("disk on fire"); });
    bool thrown = false;
    try {
      for (int i = 0; i < 1000; ++i) observer.push(nullptr, bytes.data(), bytes.size(), /*temporary_copy=*/true);
      observer.finish();
    } catch (const std::runtime_error& error) {
      thrown = std::string(error.what()) == "disk on fire";
    }
    EXPECT_TRUE(thrown);
  }
  for (int round = 0; round < 20; ++round) {  // destroyed without finish(): ranges queued and in flight dropped
    std::atomic<int> seen{0};
    ByteObserverThread observer([&](const void*, size_t) { seen.fetch_add(1); });
    for (int i = 0; i < 50; ++i) observer.push(nullptr, bytes.data(), bytes.size(), /*temporary_copy=*/false);
  }
}

TEST(Threads, ParallelForRunsEveryJobOnceAcrossThreads) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{64}}) {
    std::vector<std::atomic<int>> runs(n);
    std::vector<std::string> digests(n);  // each job writes its own slot, read after the join
    parallel_for(n, [&](size_t i) {
      runs[i].fetch_add(1);
      std::string text = "file " + std::to_string(i);
      digests[i] = sha256_hex(text.data(), text.size());
    });
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(runs[i].load(), 1) << "job " << i << " of " << n;
      std::string text = "file " + std::to_string(i);
      EXPECT_EQ(digests[i], sha256_hex(text.data(), text.size())) << "job " << i << " of " << n;
    }
  }
}

// The kernel runs a process-directed signal's handler on any thread that does not block it: the prefetcher's loader,
// parallel_for's helpers, Open MPI's progress thread. The training thread must still see the request.
TEST(Threads, StopSignalHandledOnAnotherThreadReachesTheTrainingThread) {
  PreemptionWatch watch(0, 1);
  ASSERT_FALSE(watch.requested());
  std::atomic<bool> signalled{false}, done{false};
  std::thread helper([&] {  // stands for the loader thread: the signal is sent to it alone
    while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  ASSERT_EQ(pthread_kill(helper.native_handle(), SIGUSR1), 0);
  bool seen = false;  // polled while the helper thread still runs, as the step loop does
  for (int i = 0; i < 5000 && !seen; ++i) {
    seen = watch.requested();
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  signalled.store(seen);
  done.store(true);
  helper.join();
  EXPECT_TRUE(signalled.load()) << "the training thread never saw the stop signal handled on the helper thread";
  EXPECT_EQ(watch.signal_number(), SIGUSR1);
}
