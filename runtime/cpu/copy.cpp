#include "runtime/cpu/copy.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "runtime/cpu/parallel.h"

namespace wick::cpu {

namespace {

// The offset of each run of `run` elements of a view (run divides its innermost extent, or the
// view is flat), in row-major order from element `first`: an odometer over the view's index.
struct RunCursor {
  RunCursor(const StridedView& view, bool flat, int64_t first, int64_t run)
      : v(view), flat(flat), run(run), offset(first) {
    if (flat) return;
    offset = 0;
    int64_t linear = first;
    for (int axis = v.rank - 1; axis >= 0; --axis) {
      index[axis] = linear % v.shape[axis];
      linear /= v.shape[axis];
      offset += index[axis] * v.strides[axis];
    }
  }
  void next() {
    if (flat) {
      offset += run;
      return;
    }
    int axis = v.rank - 1;
    index[axis] += run;
    offset += run * v.strides[axis];
    while (index[axis] >= v.shape[axis] && axis > 0) {
      offset -= index[axis] * v.strides[axis];
      index[axis] = 0;
      --axis;
      ++index[axis];
      offset += v.strides[axis];
    }
  }

  const StridedView& v;
  bool flat;
  int64_t run;
  int64_t offset;
  int64_t index[max_kernel_rank] = {};
};

}  // namespace

void copy_strided(void* dst, DType dst_dtype, const StridedView& dst_view, const void* src, DType src_dtype,
                  const StridedView& src_view, int64_t n) {
  dispatch_dtype(dst_dtype, [&](auto dst_tag) {
    using D = decltype(dst_tag);
    dispatch_dtype(src_dtype, [&](auto src_tag) {
      using S = decltype(src_tag);
      D* out = static_cast<D*>(dst);
      const S* in = static_cast<const S*>(src);
      bool dst_flat = dst_view.rank <= 1 && (dst_view.rank == 0 || dst_view.strides[0] == 1);
      bool src_flat = src_view.rank <= 1 && (src_view.rank == 0 || src_view.strides[0] == 1);
      if constexpr (std::is_same_v<D, S>) {
        if (dst_flat && src_flat) {
          std::memcpy(out, in, static_cast<size_t>(n) * sizeof(D));
          return;
        }
      }
      if (dst_flat && src_flat) {
        parallel_for(n, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) out[i] = convert<D>(in[i]);
        });
        return;
      }
      // Runs of `run` elements stay inside one innermost row of both views (run divides both
      // innermost extents), so offsets are computed once per run, not per element.
      int64_t dst_inner = dst_flat ? n : dst_view.shape[dst_view.rank - 1];
      int64_t src_inner = src_flat ? n : src_view.shape[src_view.rank - 1];
      int64_t dst_step = dst_flat ? 1 : dst_view.strides[dst_view.rank - 1];
      int64_t src_step = src_flat ? 1 : src_view.strides[src_view.rank - 1];
      int64_t run = std::gcd(dst_inner, src_inner);
      if (run < 1) run = 1;
      int64_t n_runs = n / run;
      parallel_for(
          n_runs,
          [&](int64_t begin, int64_t end) {
            // Offsets of consecutive runs by counting through each view's index, not by a
            // division per axis per run (small innermost extents, e.g. patchify's 2, made that the cost).
            RunCursor dst_at(dst_view, dst_flat, begin * run, run), src_at(src_view, src_flat, begin * run, run);
            for (int64_t r = begin; r < end; ++r) {
              D* o = out + dst_at.offset;
              const S* s = in + src_at.offset;
              if (dst_step == 1 && src_step == 1) {
                for (int64_t j = 0; j < run; ++j) o[j] = convert<D>(s[j]);
              } else {
                for (int64_t j = 0; j < run; ++j) o[j * dst_step] = convert<D>(s[j * src_step]);
              }
              dst_at.next();
              src_at.next();
            }
          },
          std::max<int64_t>(1, default_grain / run));
    });
  });
}

}  // namespace wick::cpu
