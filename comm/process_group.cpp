#include "comm/process_group.h"

#include <cstdio>

#include "runtime/error.h"

namespace wick::comm {
namespace {

bool overlaps(const Tensor& a, const Tensor& b) {
  auto* a0 = static_cast<const char*>(a.data());
  auto* b0 = static_cast<const char*>(b.data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

}  // namespace

bool is_segment_of(const Tensor& part, const Tensor& whole, int64_t offset) {
  return part.dtype() == whole.dtype() && offset >= 0 && offset + part.numel() <= whole.numel() &&
         static_cast<const char*>(part.data()) ==
             static_cast<const char*>(whole.data()) + offset * static_cast<int64_t>(dtype_size(whole.dtype()));
}

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::Max ? "max" : "sum"; }

std::string format_seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

std::string ProcessGroup::describe() const {
  return detail::concat("rank ", rank(), " of ", size(), " (", backend(), ")");
}

void ProcessGroup::check_tensor(const char* op, const char* role, const Tensor& tensor) const {
  DType t = tensor.dtype();
  WICK_CHECK(t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16 || t == DType::I32 ||
                 t == DType::I64,
             op, ": ", role, " has dtype ", dtype_name(t), "; collectives take f32, f64, bf16, f16, i32 or i64");
  WICK_CHECK(tensor.is_contiguous(), op, ": ", role, " ", tensor.describe(), " is not contiguous");
  WICK_CHECK(tensor.device() == device(), op, ": ", role, " is on ", tensor.device().str(), " but the ",
             backend(), " process group works on ", device().str());
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce", "tensor", tensor);
  if (tensor.numel() == 0) return std::make_shared<CompletedWork>();
  return do_all_reduce(tensor, op);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op) {
  check_tensor("reduce_scatter", "input", input);
  check_tensor("reduce_scatter", "output", output);
  WICK_CHECK(input.dtype() == output.dtype(), "reduce_scatter: input is ", dtype_name(input.dtype()),
             ", output is ", dtype_name(output.dtype()));
  WICK_CHECK(input.numel() == output.numel() * size(), "reduce_scatter: input ", input.describe(),
             " must hold size() * output.numel() = ", size(), " * ", output.numel(), " elements");
  WICK_CHECK(!overlaps(input, output), "reduce_scatter: input and output overlap");
  if (output.numel() == 0) return std::make_shared<CompletedWork>();
  return do_reduce_scatter(input, output, op);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_v_async(const Tensor& input, const Tensor& output,
                                                          const std::vector<int64_t>& counts, ReduceOp op) {
  check_tensor("reduce_scatter_v", "input", input);
  check_tensor("reduce_scatter_v", "output", output);
  WICK_CHECK(input.dtype() == output.dtype(), "reduce_scatter_v: input is ", dtype_name(input.dtype()),
             ", output is ", dtype_name(output.dtype()));
  WICK_CHECK(static_cast<int>(counts.size()) == size(), "reduce_scatter_v: ", counts.size(),
             " counts for a group of ", size(), " ranks; give one count per rank");
  int64_t total = 0, offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    WICK_CHECK(counts[r] >= 0, "reduce_scatter_v: counts[", r, "] = ", counts[r], " is negative");
    if (static_cast<int>(r) < rank()) offset += counts[r];
    total += counts[r];
  }
  WICK_CHECK(input.numel() == total, "reduce_scatter_v: input ", input.describe(), " must hold sum(counts) = ", total,
             " elements");
  const int64_t mine = counts[static_cast<size_t>(rank())];
  WICK_CHECK(output.numel() == mine, "reduce_scatter_v: output ", output.describe(), " must hold counts[", rank(),
             "] = ", mine, " elements");
  WICK_CHECK(mine == 0 || is_segment_of(output, input, offset) || !overlaps(input, output),
             "reduce_scatter_v: output overlaps input but is not its segment for rank ", rank(), " (elements ",
             offset, "..", offset + mine, ")");
  if (total == 0) return std::make_shared<CompletedWork>();
  return do_reduce_scatter_v(input, output, counts, op);
}

std::shared_ptr<Work> ProcessGroup::all_gather_async(const Tensor& input, const Tensor& output) {
  check_tensor("all_gather", "input", input);
  check_tensor("all_gather", "output", output);
  WICK_CHECK(input.dtype() == output.dtype(), "all_gather: input is ", dtype_name(input.dtype()), ", output is ",
             dtype_name(output.dtype()));
  WICK_CHECK(output.numel() == input.numel() * size(), "all_gather: output ", output.describe(),
             " must hold size() * input.numel() = ", size(), " * ", input.numel(), " elements");
  WICK_CHECK(!overlaps(input, output), "all_gather: input and output overlap");
  if (input.numel() == 0) return std::make_shared<CompletedWork>();
  return do_all_gather(input, output);
}

std::shared_ptr<Work> ProcessGroup::broadcast_async(const Tensor& tensor, int root) {
  check_tensor("broadcast", "tensor", tensor);
  WICK_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of a group of size ", size());
  if (tensor.numel() == 0) return std::make_shared<CompletedWork>();
  return do_broadcast(tensor, root);
}

std::shared_ptr<Work> ProcessGroup::barrier_async() { return do_barrier(); }

}  // namespace wick::comm
