// Deliberate faults for the sanitizers.* tests of a WICK_SANITIZE build (tests/sanitizers/check_test.sh): each
// mode must make the program fail with the sanitizer's report, under the same options and suppressions as every
// other test, so a suppression that grew too wide (or a sanitizer switched off) fails the run.
//   leak_check leak      a wick::Tensor leaked on the heap, one from inside an OpenMP parallel region
//   leak_check overflow  a heap read one past the end of a tensor's storage
//   leak_check ub        a signed integer overflow
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime/tensor.h"

namespace {

wick::Tensor* volatile sink = nullptr;  // last holder of the leaked handles, cleared before exit

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "leak") == 0) {
    sink = new wick::Tensor(wick::Tensor::from_vector<float>({1, 2, 3}, {3}));
#pragma omp parallel num_threads(2)
    {
#pragma omp master
      sink = new wick::Tensor(wick::Tensor::empty({4, 4}, wick::DType::F32));
    }
    sink = nullptr;
    std::printf("leak_check: leaked two tensors\n");
    return 0;
  }
  if (std::strcmp(mode, "overflow") == 0) {
    wick::Tensor x = wick::Tensor::from_vector<float>({1, 2, 3}, {3});
    const float* data = x.data_as<float>();
    volatile int64_t end = x.storage()->bytes() / sizeof(float);
    std::printf("leak_check: read %g\n", data[end]);
    return 0;
  }
  if (std::strcmp(mode, "ub") == 0) {
    volatile int32_t big = INT32_MAX;
    int32_t sum = big + static_cast<int32_t>(argc);
    std::printf("leak_check: %d\n", sum);
    return 0;
  }
  std::fprintf(stderr, "usage: leak_check leak|overflow|ub\n");
  return 2;
}
