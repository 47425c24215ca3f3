// The memory AutoencoderKL::encode / decode needs, counted from the code without running it: the
// tensors each layer allocates and frees, in the order the forward passes do (vae_blocks.cpp,
// vae.cpp, vae_tiling.cpp). tests/models/vae_test.cpp checks it against memory_stats on the CPU.
//
//   VaeMemoryEstimate m = estimate_vae_memory(ldm_vae_config(16, false), VaePass::Decode, 1, 2048, 2048);
//   VaeMemoryEstimate t = estimate_vae_memory(config, VaePass::Decode, 1, 2048, 2048, {.tile_size = 512});
//   std::printf("%s\n", describe(m).c_str());   // "decode 1 x 2048 x 2048 f32: weights 320 MiB, peak ..."
//
// What is counted: every tensor (parameters, activations, statistics, casts, the tiles' blend
// buffers). Not counted, and stated separately: the CPU convolution's im2col buffer (a std::vector of
// C_in·k²·H_out·W_out f32 values per batch item, reused across layers) and, on CUDA, cuDNN's
// convolution workspace (at most 1 GiB, runtime/cuda/conv.cu) and the allocator's caching.
#pragma once

#include <cstdint>
#include <string>

#include "models/vae/vae_config.h"
#include "models/vae/vae_tiling.h"

namespace wick::vae {

enum class VaePass { Encode, Decode };

struct VaeMemoryEstimate {
  int64_t weights = 0;  // parameter bytes (config.dtype)
  int64_t input = 0;    // the images (encode) or latents (decode), in config.dtype
  int64_t output = 0;   // mean and logvar (encode) or the images (decode)
  // The most bytes the call holds at once beyond what was live before it (weights and input),
  // output included: what memory_stats' peak rises by.
  int64_t peak = 0;
  std::string peak_at;           // the step at the peak, e.g. "decoder.up.0.block.0 norm1 + silu"
  int64_t cpu_conv_columns = 0;  // the largest im2col buffer of one batch item (CPU only; not a tensor)
  int64_t n_tiles = 1;
  // weights + input + peak: the high-water mark of the tensors while the call runs.
  int64_t total() const { return weights + input + peak; }
};

// The call encode(images [batch, in_channels, height, width]) or decode(z [batch, z_channels,
// height / f, width / f]) with `tiling`, for a model of `config` (dtype and device from it), the input
// already in config.dtype on config.device. height and width are image pixels, multiples of the
// downscale factor f.
VaeMemoryEstimate estimate_vae_memory(const VaeConfig& config, VaePass pass, int64_t batch, int64_t height,
                                      int64_t width, const VaeTiling& tiling = {});

// "decode 1 x 3 x 2048 x 2048 f32 on cpu, untiled: weights 320 MiB, peak 11.5 GiB (at ...), total ...".
std::string describe(const VaeMemoryEstimate& estimate, const VaeConfig& config, VaePass pass, int64_t batch,
                     int64_t height, int64_t width, const VaeTiling& tiling = {});

}  // namespace wick::vae
