// Deliberate thread faults for tsan.catch_races of a WICK_TSAN build (tests/sanitizers/tsan_check_test.sh): each
// faulty mode must make tests/sanitizers/tsan_run.sh fail with ThreadSanitizer's report, under the same options and
// suppressions as every other test labelled tsan, so a suppression that grew too wide, ThreadSanitizer switched off or
// the report collection broken fails the run; the clean mode must pass it.
//   race_check race        two std::threads add to the same element of a wick::Tensor without a lock
//   race_check lock_order  two threads take two mutexes in opposite orders (one after the other: no real deadlock)
//   race_check clean       the additions of `race` under a mutex
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "runtime/tensor.h"

namespace {

void add_from_two_threads(wick::Tensor& x, std::mutex* lock) {
  float* data = x.data_as<float>();
  auto add = [&] {
    for (int i = 0; i < 1000; ++i) {
      if (lock != nullptr) {
        std::lock_guard<std::mutex> guard(*lock);
        data[1] += 1.0f;
      } else {
        data[1] += 1.0f;
      }
    }
  };
  std::thread first(add), second(add);
  first.join();
  second.join();
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "race") == 0 || std::strcmp(mode, "clean") == 0) {
    wick::Tensor x = wick::Tensor::from_vector<float>({0, 0, 0}, {3});
    std::mutex lock;
    add_from_two_threads(x, std::strcmp(mode, "clean") == 0 ? &lock : nullptr);
    std::printf("race_check %s: %g\n", mode, x.to_vector<float>()[1]);
    return 0;
  }
  if (std::strcmp(mode, "lock_order") == 0) {
    std::mutex a, b;
    std::thread([&] {
      std::lock_guard<std::mutex> first(a);
      std::lock_guard<std::mutex> second(b);
    }).join();
    std::thread([&] {
      std::lock_guard<std::mutex> first(b);
      std::lock_guard<std::mutex> second(a);
    }).join();
    std::printf("race_check lock_order: done\n");
    return 0;
  }
  std::fprintf(stderr, "usage: race_check race|lock_order|clean\n");
  return 2;
}
