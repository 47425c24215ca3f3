#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/random.h"
#include "runtime/kernel_args.h"

namespace wick::cuda {

// ---- kernels ----
// One thread per Philox block (4 stream elements); grid-stride over the blocks.
template <typename T>
__global__ void fill_random_kernel(T* out, uint64_t n, RngStream rng, uint64_t offset, uint64_t first_block,
                                   uint64_t n_blocks, RandomDistribution dist, float scale, float shift) {
  auto store = [out](uint64_t index, float value) { out[index] = convert<T>(value); };
  for (uint64_t b = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; b < n_blocks; b += uint64_t(gridDim.x) * blockDim.x)
    fill_block(rng, first_block + b, offset, n, dist, scale, shift, store);
}

// ---- launchers ----
void fill_random(void* out, DType dtype, int64_t n, const RngStream& rng, uint64_t offset, RandomDistribution dist,
                 float scale, float shift, void* stream) {
  if (n <= 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  uint64_t count = static_cast<uint64_t>(n);
  uint64_t first_block = offset / 4, last_block = (offset + count - 1) / 4;
  uint64_t n_blocks = last_block - first_block + 1;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_random_kernel<T><<<grid_for(static_cast<int64_t>(n_blocks)), block_size, 0, s>>>(
        static_cast<T*>(out), count, rng, offset, first_block, n_blocks, dist, scale, shift);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace wick::cuda
