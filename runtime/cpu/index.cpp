#include "runtime/cpu/index.h"

#include <cstring>

#include "runtime/cpu/parallel.h"

namespace wick::cpu {
namespace {

// Calls fn with an unsigned integer type of element_size bytes: moving elements needs no dtype.
template <typename Fn>
void dispatch_word(int element_size, Fn&& fn) {
  switch (element_size) {
    case 1: fn(uint8_t{}); break;
    case 2: fn(uint16_t{}); break;
    case 4: fn(uint32_t{}); break;
    default: fn(uint64_t{}); break;
  }
}

}  // namespace

void index_select(void* out, const void* x, int element_size, const int64_t* index, int64_t n_index, int64_t outer,
                  int64_t extent, int64_t inner) {
  const size_t row_bytes = static_cast<size_t>(inner) * element_size;
  auto* out_bytes = static_cast<char*>(out);
  const auto* x_bytes = static_cast<const char*>(x);
  int64_t n_rows = outer * n_index;
  // Grain in rows so that small rows still reach the element threshold before threading.
  int64_t grain = std::max<int64_t>(1, default_grain / std::max<int64_t>(1, inner));
  parallel_for(
      n_rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          int64_t o = row / n_index, r = row % n_index;
          std::memcpy(out_bytes + row * row_bytes, x_bytes + (o * extent + index[r]) * row_bytes, row_bytes);
        }
      },
      grain);
}

void gather(void* out, const void* x, int element_size, const StridedView& x_view, int64_t axis_stride,
            const int64_t* index, int64_t n) {
  dispatch_word(element_size, [&](auto tag) {
    using W = decltype(tag);
    W* o = static_cast<W*>(out);
    const W* in = static_cast<const W*>(x);
    parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = in[x_view.offset_of(i) + index[i] * axis_stride];
    });
  });
}

void scatter_add(void* out, DType dtype, const StridedView& out_view, int64_t axis_stride, const int64_t* index,
                 const void* src, const StridedView& src_view, int64_t n) {
  // Serial: repeated indices make the targets overlap, and a fixed order keeps sums reproducible.
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, int64_t>) {
      T* o = static_cast<T*>(out);
      const T* s = static_cast<const T*>(src);
      for (int64_t i = 0; i < n; ++i) o[out_view.offset_of(i) + index[i] * axis_stride] += s[src_view.offset_of(i)];
    }
  });
}

void index_add(void* out, DType dtype, const void* src, const int64_t* index, int64_t n_index, int64_t outer,
               int64_t extent, int64_t inner) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, int64_t>) {
      T* o = static_cast<T*>(out);
      const T* s = static_cast<const T*>(src);
      int64_t n_columns = outer * inner;
      // Threads own disjoint output columns; within a column the terms are added in index order.
      int64_t grain = std::max<int64_t>(1, default_grain / std::max<int64_t>(1, n_index));
      parallel_for(
          n_columns,
          [&](int64_t begin, int64_t end) {
            for (int64_t r = 0; r < n_index; ++r) {
              for (int64_t column = begin; column < end;) {
                int64_t b = column / inner, c = column % inner;
                int64_t run = std::min(end - column, inner - c);  // contiguous within one outer slice
                T* to = o + (b * extent + index[r]) * inner + c;
                const T* from = s + (b * n_index + r) * inner + c;
                for (int64_t k = 0; k < run; ++k) to[k] += from[k];
                column += run;
              }
            }
          },
          grain);
    }
  });
}

}  // namespace wick::cpu
