#include "models/vae/vae_memory.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "models/vae/vae_blocks.h"
#include "runtime/error.h"

namespace wick::vae {
namespace {

struct Extent {
  int64_t channels = 0, height = 0, width = 0;
};

// Replays the allocations of encode / decode in the order the code makes them. Each layer function
// is called with its input live (held by the caller), leaves its output live and frees everything
// else it made; the caller frees the input when the code drops it.
class Replay {
 public:
  Replay(const VaeConfig& c, int64_t batch) : c_(c), batch_(batch) {}

  int64_t live() const { return live_; }
  int64_t peak() const { return peak_; }
  const std::string& peak_at() const { return peak_at_; }
  int64_t columns() const { return columns_; }

  void alloc(int64_t bytes) {
    live_ += bytes;
    if (live_ > peak_) {
      peak_ = live_;
      peak_at_ = where_;
    }
  }
  void free(int64_t bytes) { live_ -= bytes; }
  void at(std::string where) { where_ = std::move(where); }

  int64_t bytes(const Extent& e, DType dtype) const {
    return batch_ * e.channels * e.height * e.width * static_cast<int64_t>(dtype_size(dtype));
  }
  int64_t bytes(const Extent& e) const { return bytes(e, c_.dtype); }

  // runtime/ops/conv.cpp: 16-bit on the CPU casts x, weight and bias to f32 and the result back; a
  // non-contiguous x (a tile) is copied.
  Extent conv(const Extent& in, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
              bool contiguous = true) {
    const Extent out{out_channels, (in.height + 2 * padding - kernel) / stride + 1,
                     (in.width + 2 * padding - kernel) / stride + 1};
    const bool cast = c_.device.is_cpu() && (c_.dtype == DType::BF16 || c_.dtype == DType::F16);
    const DType compute = cast ? DType::F32 : c_.dtype;
    int64_t temporaries = 0;
    auto temporary = [&](int64_t n) {
      alloc(n);
      temporaries += n;
    };
    if (cast) {
      temporary(bytes(in, DType::F32));
      temporary(out_channels * in.channels * kernel * kernel * 4);
      temporary(out_channels * 4);
    } else if (!contiguous) {
      temporary(bytes(in));
    }
    const int64_t y = bytes(out, compute);
    alloc(y);
    const bool pointwise = kernel == 1 && stride == 1 && padding == 0;
    if (c_.device.is_cpu() && !pointwise)
      columns_ = std::max(
          columns_, in.channels * kernel * kernel * out.height * out.width * static_cast<int64_t>(dtype_size(compute)));
    if (cast) {
      alloc(bytes(out));
      free(y);
    }
    free(temporaries);
    return out;
  }

  // runtime/ops/norm.cpp: affine parameters in the statistics dtype, y, mean and rstd [B, groups].
  void group_norm(const Extent& e) {
    const int64_t stats = c_.dtype == DType::F64 ? 8 : 4;
    const int64_t affine = static_cast<int64_t>(dtype_size(c_.dtype)) == stats ? 0 : 2 * e.channels * stats;
    alloc(affine);
    alloc(bytes(e));
    alloc(2 * batch_ * c_.norm_groups * stats);
    free(2 * batch_ * c_.norm_groups * stats);
    free(affine);
  }

  // silu(norm(x)): the norm's output is freed once silu's exists.
  void norm_silu(const Extent& e) {
    group_norm(e);
    alloc(bytes(e));
    free(bytes(e));
  }

  Extent resnet(const std::string& name, const Extent& in, int64_t out_channels) {
    at(name + " norm1 + silu");
    norm_silu(in);
    at(name + " conv1");
    const Extent out = conv(in, out_channels, 3, 1, 1);
    free(bytes(in));  // silu(norm1(x))
    at(name + " norm2 + silu");
    norm_silu(out);
    free(bytes(out));  // conv1's output
    at(name + " conv2");
    conv(out, out_channels, 3, 1, 1);
    free(bytes(out));  // silu(norm2(h))
    at(name + " shortcut + add");
    if (in.channels != out_channels) {
      conv(in, out_channels, 1, 1, 0);
      alloc(bytes(out));
      free(bytes(out));  // the shortcut
    } else {
      alloc(bytes(out));
    }
    free(bytes(out));  // conv2's output
    return out;
  }

  void attention(const std::string& name, const Extent& e) {
    at(name + " norm, q, k, v");
    group_norm(e);
    for (int i = 0; i < 3; ++i) conv(e, e.channels, 1, 1, 0);
    free(bytes(e));  // norm
    at(name + " attention");
    const int64_t n = e.height * e.width;
    const DType math = c_.dtype == DType::F64 ? DType::F64 : DType::F32;
    const int64_t element = dtype_size(math), full = batch_ * e.channels * n * element;
    const bool cast = math != c_.dtype;
    if (cast) alloc(full);  // q in f32
    alloc(full);            // q * scale
    if (cast) {
      free(full);
      alloc(2 * full);  // k and v in f32
    }
    const int64_t rows = attention_chunk_rows(batch_, n, c_.attention_query_chunk, math);
    const int64_t scores = batch_ * rows * n * element;
    if (rows == n) {
      alloc(scores);
      alloc(scores);  // softmax
      free(scores);
      alloc(full);  // v @ p^T
      free(scores);
    } else {
      alloc(full);  // the output, filled chunk by chunk
      alloc(scores);
      alloc(scores);
      free(scores);
      alloc(batch_ * e.channels * rows * element);
      free(scores);
      free(batch_ * e.channels * rows * element);
    }
    if (cast) {
      alloc(bytes(e));               // the result in the model's dtype
      free(full + full + 2 * full);  // out, scaled q, k and v in f32
    } else {
      free(full);  // scaled q; the result is `out` itself
    }
    free(3 * bytes(e));  // q, k, v
    at(name + " proj_out + add");
    conv(e, e.channels, 1, 1, 0);
    alloc(bytes(e));
    free(bytes(e));  // proj_out
    free(bytes(e));  // the attention's result
  }

  // h <- layer(h), the old h freed.
  template <typename Layer>
  Extent step(const Extent& h, Layer&& layer) {
    const Extent out = layer(h);
    free(bytes(h));
    return out;
  }

  Extent mid(const std::string& name, Extent h) {
    h = step(h, [&](const Extent& x) { return resnet(name + ".block_1", x, x.channels); });
    if (c_.mid_attention)
      h = step(h, [&](const Extent& x) {
        attention(name + ".attn_1", x);
        return x;
      });
    return step(h, [&](const Extent& x) { return resnet(name + ".block_2", x, x.channels); });
  }

  // The output of the last conv, after norm_out + silu.
  Extent finish(const std::string& name, const Extent& h, int64_t out_channels) {
    at(name + ".norm_out + silu");
    norm_silu(h);
    free(bytes(h));
    at(name + ".conv_out");
    const Extent out = conv(h, out_channels, 3, 1, 1);
    free(bytes(h));
    return out;
  }

  Extent encoder(const Extent& images, bool contiguous) {
    const std::vector<int64_t>& ch = c_.block_channels;
    at("encoder.conv_in");
    Extent h = conv(images, ch[0], 3, 1, 1, contiguous);
    for (int64_t i = 0; i < c_.n_levels(); ++i) {
      const std::string level = "encoder.down." + std::to_string(i);
      for (int64_t j = 0; j < c_.encoder_blocks; ++j)
        h = step(h, [&](const Extent& x) {
          return resnet(level + ".block." + std::to_string(j), x, ch[static_cast<size_t>(i)]);
        });
      if (i + 1 < c_.n_levels())
        h = step(h, [&](const Extent& x) {
          at(level + ".downsample");
          const Extent padded{x.channels, x.height + 1, x.width + 1};
          alloc(bytes(padded));
          const Extent out = conv(padded, x.channels, 3, 2, 0);
          free(bytes(padded));
          return out;
        });
    }
    h = mid("encoder.mid", h);
    return finish("encoder", h, 2 * c_.z_channels);
  }

  Extent decoder(const Extent& z, bool contiguous) {
    const std::vector<int64_t>& ch = c_.block_channels;
    at("decoder.conv_in");
    Extent h = conv(z, ch.back(), 3, 1, 1, contiguous);
    h = mid("decoder.mid", h);
    for (int64_t i = c_.n_levels() - 1; i >= 0; --i) {
      const std::string level = "decoder.up." + std::to_string(i);
      for (int64_t j = 0; j < c_.decoder_blocks; ++j)
        h = step(h, [&](const Extent& x) {
          return resnet(level + ".block." + std::to_string(j), x, ch[static_cast<size_t>(i)]);
        });
      if (i > 0)
        h = step(h, [&](const Extent& x) {
          at(level + ".upsample");
          const Extent up{x.channels, 2 * x.height, 2 * x.width};
          alloc(bytes(up));
          const Extent out = conv(up, x.channels, 3, 1, 1);
          free(bytes(up));
          return out;
        });
    }
    return finish("decoder", h, c_.out_channels);
  }

  // tiled_apply (vae_tiling.cpp) over `in`, `fn` replaying one tile's pass (its input a
  // non-contiguous view); returns the blended output, in the model's dtype.
  template <typename Fn>
  Extent tiled(const Extent& in, const TileGrid& grid, Fn&& fn, int64_t* n_tiles) {
    const std::vector<TileSpan> rows = tile_spans(in.height, grid.tile, grid.overlap, grid.align);
    const std::vector<TileSpan> columns = tile_spans(in.width, grid.tile, grid.overlap, grid.align);
    *n_tiles = static_cast<int64_t>(rows.size() * columns.size());
    const DType accumulate = c_.dtype == DType::F64 ? DType::F64 : DType::F32;
    Extent out{};
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t j = 0; j < columns.size(); ++j) {
        at("tile " + std::to_string(i) + ", " + std::to_string(j));
        const Extent y = fn(Extent{in.channels, rows[i].size, columns[j].size});
        at("tile " + std::to_string(i) + ", " + std::to_string(j) + " blend");
        if (i == 0 && j == 0) {
          out = Extent{y.channels, in.height * grid.scale_num / grid.scale_den,
                       in.width * grid.scale_num / grid.scale_den};
          alloc(bytes(out, accumulate));
        }
        const int64_t weighted = bytes(y, accumulate), row_weights = y.height * 4, column_weights = y.width * 4;
        const bool cast = accumulate != c_.dtype;
        if (cast) alloc(weighted);
        alloc(row_weights);
        alloc(weighted);
        alloc(column_weights);
        alloc(weighted);
        free(row_weights + column_weights + weighted + (cast ? weighted : 0));
        free(bytes(y));
        alloc(weighted);  // region + weighted
        free(2 * weighted);
      }
    if (accumulate != c_.dtype) {
      alloc(bytes(out));
      free(bytes(out, accumulate));
    }
    return out;
  }

 private:
  const VaeConfig& c_;
  int64_t batch_;
  int64_t live_ = 0, peak_ = 0, columns_ = 0;
  std::string where_, peak_at_;
};

std::string size_text(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024)
    std::snprintf(text, sizeof text, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else
    std::snprintf(text, sizeof text, "%.0f MiB", b / (1024.0 * 1024));
  return text;
}

}  // namespace

VaeMemoryEstimate estimate_vae_memory(const VaeConfig& c, VaePass pass, int64_t batch, int64_t height, int64_t width,
                                      const VaeTiling& tiling) {
  validate(c);
  const int64_t f = c.downscale();
  WICK_CHECK(batch > 0 && height > 0 && width > 0 && height % f == 0 && width % f == 0, "estimate_vae_memory: batch ",
             batch, " and an image of ", height, " x ", width, " pixels (multiples of ", f, ")");
  VaeMemoryEstimate out;
  for (const auto& [name, shape] : parameter_shapes(c)) out.weights += numel(shape) * dtype_size(c.dtype);
  Replay replay(c, batch);
  const Extent image{c.in_channels, height, width}, latent{c.z_channels, height / f, width / f};
  // AutoencoderKL::grid, in input units of the pass.
  const int64_t overlap = tiling.overlap < 0 ? tiling.tile_size / 4 : tiling.overlap;
  const bool tiled = tiling.tile_size > 0 && (height > tiling.tile_size || width > tiling.tile_size);
  if (pass == VaePass::Encode) {
    out.input = replay.bytes(image);
    Extent moments;
    if (tiled) {
      const TileGrid grid{.tile = tiling.tile_size, .overlap = overlap, .align = f, .scale_num = 1, .scale_den = f};
      moments = replay.tiled(
          image, grid,
          [&](const Extent& tile) {
            const Extent m = replay.encoder(tile, /*contiguous=*/false);
            if (!c.quant_conv) return m;
            replay.at("quant_conv");
            const Extent q = replay.conv(m, m.channels, 1, 1, 0);
            replay.free(replay.bytes(m));
            return q;
          },
          &out.n_tiles);
    } else {
      moments = replay.encoder(image, /*contiguous=*/true);
      if (c.quant_conv) {
        replay.at("quant_conv");
        replay.conv(moments, moments.channels, 1, 1, 0);
        replay.free(replay.bytes(moments));
      }
    }
    replay.at("mean, logvar");
    const Extent half{c.z_channels, moments.height, moments.width};
    replay.alloc(replay.bytes(half));  // mean
    replay.alloc(replay.bytes(half));  // max(logvar, -30)
    replay.alloc(replay.bytes(half));  // min(..., 20)
    replay.free(replay.bytes(half));
    replay.free(replay.bytes(moments));
    out.output = 2 * replay.bytes(half);
  } else {
    out.input = replay.bytes(latent);
    Extent post = latent;
    if (c.post_quant_conv) {
      replay.at("post_quant_conv");
      post = replay.conv(latent, latent.channels, 1, 1, 0);
    }
    Extent images;
    if (tiled) {
      const TileGrid grid{
          .tile = tiling.tile_size / f, .overlap = (overlap + f - 1) / f, .align = 1, .scale_num = f, .scale_den = 1};
      images = replay.tiled(
          post, grid, [&](const Extent& tile) { return replay.decoder(tile, /*contiguous=*/false); }, &out.n_tiles);
    } else {
      images = replay.decoder(post, /*contiguous=*/true);
    }
    if (c.post_quant_conv) replay.free(replay.bytes(post));
    out.output = replay.bytes(images);
  }
  WICK_CHECK(replay.live() == out.output, "estimate_vae_memory: the replay ends with ", replay.live(),
             " bytes live, expected the output's ", out.output);
  out.peak = replay.peak();
  out.peak_at = replay.peak_at();
  out.cpu_conv_columns = replay.columns();
  return out;
}

std::string describe(const VaeMemoryEstimate& m, const VaeConfig& c, VaePass pass, int64_t batch, int64_t height,
                     int64_t width, const VaeTiling& tiling) {
  std::ostringstream out;
  out << (pass == VaePass::Encode ? "encode " : "decode ") << batch << " x " << height << " x " << width << " "
      << dtype_name(c.dtype) << " on " << (c.device.is_cpu() ? "cpu" : "cuda") << ", ";
  if (m.n_tiles > 1)
    out << m.n_tiles << " tiles of " << tiling.tile_size << " px";
  else
    out << "untiled";
  out << ": weights " << size_text(m.weights) << ", peak " << size_text(m.peak) << " (at " << m.peak_at << "), total "
      << size_text(m.total());
  if (m.cpu_conv_columns > 0) out << " + im2col " << size_text(m.cpu_conv_columns);
  return out.str();
}

}  // namespace wick::vae
