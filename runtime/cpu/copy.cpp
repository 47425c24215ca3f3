#include <cstring>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/parallel.h"

namespace wick::cpu {

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
      parallel_for(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[dst_view.offset_of(i)] = convert<D>(in[src_view.offset_of(i)]);
      });
    });
  });
}

}  // namespace wick::cpu
