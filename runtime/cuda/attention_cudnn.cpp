// cuDNN frontend SDPA (flash attention) forward and backward for runtime/ops/attention.h, compiled
// by the host compiler. Built only with WICK_HAS_CUDNN_FRONTEND; otherwise attention_forward_cudnn /
// attention_backward_cudnn report "not run".
#include "runtime/cuda/attention.h"

#if WICK_HAS_CUDNN_FRONTEND
// The frontend's JSON support specializes nlohmann templates that wick also uses; keep it out.
#define CUDNN_FRONTEND_SKIP_JSON_LIB 1
#include <cudnn_frontend.h>

#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/memory.h"
#endif

namespace wick::cuda {

#if WICK_HAS_CUDNN_FRONTEND
namespace {

namespace fe = cudnn_frontend;

enum Uid : int64_t { q_uid = 1, k_uid, v_uid, out_uid, stats_uid, grad_out_uid, grad_q_uid, grad_k_uid, grad_v_uid };

// Everything a built graph depends on. Pointers are not part of it: they go in the variant pack.
using GraphKey = std::tuple<int, int, bool, float, std::vector<int64_t>>;

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN could not build this configuration
  int64_t workspace_bytes = 0;
};

std::mutex& cache_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<GraphKey, CachedGraph>& graph_cache() {
  static std::map<GraphKey, CachedGraph> cache;
  return cache;
}
std::map<GraphKey, CachedGraph>& backward_graph_cache() {
  static std::map<GraphKey, CachedGraph> cache;
  return cache;
}

// One cuDNN handle per thread and device (handles are not safe to share between threads).
// Deliberately never destroyed: destroying at thread exit may run after the CUDA context is gone.
cudnnHandle_t handle_for(int device) {
  thread_local std::map<int, cudnnHandle_t> handles;
  auto found = handles.find(device);
  if (found != handles.end()) return found->second;
  cudnnHandle_t handle = nullptr;
  CUDNN_CHECK(cudnnCreate(&handle));
  handles[device] = handle;
  return handle;
}

std::vector<int64_t> strides_of(const int64_t (&strides)[4]) {
  return {strides[0], strides[1], strides[2], strides[3]};
}

// `strides` when given (a unit last stride), else those of a contiguous [B, h, l, d] tensor.
std::vector<int64_t> strides_or_dense(const int64_t (&strides)[4], int64_t h, int64_t l, int64_t d) {
  if (strides[3] == 1) return strides_of(strides);
  return {h * l * d, l * d, d, 1};
}

std::shared_ptr<fe::graph::Graph> build_graph(cudnnHandle_t handle, DType dtype, const AttentionDims& dims, bool causal,
                                              float scale) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(dtype == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t b = dims.batch, h = dims.heads, s_q = dims.n_queries, s_kv = dims.n_keys;
  auto q = graph->tensor(fe::graph::Tensor_attributes()
                             .set_name("q")
                             .set_uid(q_uid)
                             .set_dim({b, h, s_q, dims.head_dim})
                             .set_stride(strides_of(dims.q_strides)));
  auto k = graph->tensor(fe::graph::Tensor_attributes()
                             .set_name("k")
                             .set_uid(k_uid)
                             .set_dim({b, h, s_kv, dims.head_dim})
                             .set_stride(strides_of(dims.k_strides)));
  auto v = graph->tensor(fe::graph::Tensor_attributes()
                             .set_name("v")
                             .set_uid(v_uid)
                             .set_dim({b, h, s_kv, dims.value_dim})
                             .set_stride(strides_of(dims.v_strides)));
  auto options = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(scale);
  if (causal)  // key j kept for query i when j <= i (top-left diagonal, as torch's is_causal)
    options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  auto [out, stats] = graph->sdpa(q, k, v, options);
  out->set_output(true)
      .set_uid(out_uid)
      .set_dim({b, h, s_q, dims.value_dim})
      .set_stride(strides_or_dense(dims.out_strides, h, s_q, dims.value_dim));
  // Stats: the natural-log logsumexp of the scaled scores per query row, [B, H, Lq, 1] f32.
  stats->set_output(true)
      .set_uid(stats_uid)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({b, h, s_q, 1})
      .set_stride({h * s_q, s_q, 1, 1});
  try {
    if (!graph->build(handle, {fe::HeurMode_t::A}).is_good()) return nullptr;
  } catch (const std::exception&) {  // some frontend versions throw instead of returning an error
    return nullptr;
  }
  return graph;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& graph, const char* name, int64_t uid,
                                                   std::vector<int64_t> dim, const int64_t (&strides)[4]) {
  return graph.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dim)).set_stride(strides_of(strides)));
}

// dQ, dK, dV from q, k, v, out, dO and the forward's stats (the natural-log logsumexp, [B, H, Lq, 1]
// f32 packed, which is how runtime/ops/attention.h returns logsumexp on both CUDA paths).
std::shared_ptr<fe::graph::Graph> build_backward_graph(cudnnHandle_t handle, DType dtype,
                                                       const AttentionBackwardDims& bd, bool causal, float scale) {
  const AttentionDims& dims = bd.forward;
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(dtype == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t b = dims.batch, h = dims.heads, s_q = dims.n_queries, s_kv = dims.n_keys, d = dims.head_dim,
                dv = dims.value_dim;
  auto q = input(*graph, "q", q_uid, {b, h, s_q, d}, dims.q_strides);
  auto k = input(*graph, "k", k_uid, {b, h, s_kv, d}, dims.k_strides);
  auto v = input(*graph, "v", v_uid, {b, h, s_kv, dv}, dims.v_strides);
  auto o = input(*graph, "o", out_uid, {b, h, s_q, dv}, bd.out_strides);
  auto grad_o = input(*graph, "dO", grad_out_uid, {b, h, s_q, dv}, bd.grad_out_strides);
  auto stats = graph->tensor(fe::graph::Tensor_attributes()
                                 .set_name("stats")
                                 .set_uid(stats_uid)
                                 .set_dim({b, h, s_q, 1})
                                 .set_stride({h * s_q, s_q, 1, 1})
                                 .set_data_type(fe::DataType_t::FLOAT));
  // Default (non-deterministic) algorithm, as torch's cuDNN backend uses unless deterministic
  // algorithms are requested: dQ may be accumulated with atomics in an unspecified order.
  auto options = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(scale);
  if (causal)  // key j kept for query i when j <= i (top-left diagonal, as in the forward)
    options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  auto [grad_q, grad_k, grad_v] = graph->sdpa_backward(q, k, v, o, grad_o, stats, options);
  grad_q->set_output(true).set_uid(grad_q_uid).set_dim({b, h, s_q, d}).set_stride(
      strides_or_dense(bd.grad_q_strides, h, s_q, d));
  grad_k->set_output(true).set_uid(grad_k_uid).set_dim({b, h, s_kv, d}).set_stride(
      strides_or_dense(bd.grad_k_strides, h, s_kv, d));
  grad_v->set_output(true).set_uid(grad_v_uid).set_dim({b, h, s_kv, dv}).set_stride(
      strides_or_dense(bd.grad_v_strides, h, s_kv, dv));
  try {
    if (!graph->build(handle, {fe::HeurMode_t::A}).is_good()) return nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
  return graph;
}

// The cached graph for `key`, built by `build` on first use (null graph: cuDNN rejected it).
template <typename Build>
CachedGraph cached_graph(std::map<GraphKey, CachedGraph>& cache, const GraphKey& key, const Build& build) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  CachedGraph entry;
  entry.graph = build();
  if (entry.graph && !entry.graph->get_workspace_size(entry.workspace_bytes).is_good()) entry.graph = nullptr;
  cache[key] = entry;
  return entry;
}

// Runs a built graph with a workspace from wick's allocator (stream-ordered).
void execute(const CachedGraph& entry, cudnnHandle_t handle, int device, std::unordered_map<int64_t, void*>& pack,
             void* stream, const char* op) {
  Stream on{Device::cuda(device), stream};
  size_t workspace_bytes = static_cast<size_t>(entry.workspace_bytes);
  void* workspace = workspace_bytes > 0 ? allocate_bytes(Device::cuda(device), workspace_bytes, on) : nullptr;
  auto status = entry.graph->execute(handle, pack, workspace);
  if (workspace != nullptr) free_bytes(Device::cuda(device), workspace, workspace_bytes, on);
  WICK_CHECK_KIND(Runtime, status.is_good(), op, ": cuDNN SDPA execution failed: ", status.get_message());
}

}  // namespace

bool cudnn_attention_compiled() { return true; }

bool attention_forward_cudnn(int device, DType dtype, const void* q, const void* k, const void* v,
                             const AttentionDims& dims, bool causal, float scale, void* out, float* logsumexp,
                             void* stream) {
  if (dtype != DType::BF16 && dtype != DType::F16) return false;
  cudnnHandle_t handle = handle_for(device);
  CUDNN_CHECK(cudnnSetStream(handle, static_cast<cudaStream_t>(stream)));
  std::vector<int64_t> shape_key = {dims.batch, dims.heads, dims.n_queries, dims.n_keys, dims.head_dim, dims.value_dim};
  for (const int64_t* strides : {dims.q_strides, dims.k_strides, dims.v_strides, dims.out_strides})
    shape_key.insert(shape_key.end(), strides, strides + 4);
  GraphKey key{device, static_cast<int>(dtype), causal, scale, shape_key};
  CachedGraph entry =
      cached_graph(graph_cache(), key, [&] { return build_graph(handle, dtype, dims, causal, scale); });
  if (!entry.graph) return false;
  std::unordered_map<int64_t, void*> pack = {{q_uid, const_cast<void*>(q)},
                                             {k_uid, const_cast<void*>(k)},
                                             {v_uid, const_cast<void*>(v)},
                                             {out_uid, out},
                                             {stats_uid, logsumexp}};
  execute(entry, handle, device, pack, stream, "scaled_dot_product_attention");
  return true;
}

bool attention_backward_cudnn(int device, DType dtype, const void* grad_out, const void* q, const void* k,
                              const void* v, const void* out, const float* logsumexp,
                              const AttentionBackwardDims& bd, bool causal, float scale, void* grad_q,
                              void* grad_k, void* grad_v, void* stream) {
  if (dtype != DType::BF16 && dtype != DType::F16) return false;
  cudnnHandle_t handle = handle_for(device);
  CUDNN_CHECK(cudnnSetStream(handle, static_cast<cudaStream_t>(stream)));
  const AttentionDims& dims = bd.forward;
  std::vector<int64_t> shape_key = {dims.batch, dims.heads, dims.n_queries, dims.n_keys, dims.head_dim, dims.value_dim};
  for (const int64_t* strides : {dims.q_strides, dims.k_strides, dims.v_strides, bd.out_strides, bd.grad_out_strides,
                                 bd.grad_q_strides, bd.grad_k_strides, bd.grad_v_strides})
    shape_key.insert(shape_key.end(), strides, strides + 4);
  GraphKey key{device, static_cast<int>(dtype), causal, scale, shape_key};
  CachedGraph entry =
      cached_graph(backward_graph_cache(), key, [&] { return build_backward_graph(handle, dtype, bd, causal, scale); });
  if (!entry.graph) return false;
  std::unordered_map<int64_t, void*> pack = {{q_uid, const_cast<void*>(q)},
                                             {k_uid, const_cast<void*>(k)},
                                             {v_uid, const_cast<void*>(v)},
                                             {out_uid, const_cast<void*>(out)},
                                             {grad_out_uid, const_cast<void*>(grad_out)},
                                             {stats_uid, const_cast<float*>(logsumexp)},
                                             {grad_q_uid, grad_q},
                                             {grad_k_uid, grad_k},
                                             {grad_v_uid, grad_v}};
  execute(entry, handle, device, pack, stream, "scaled_dot_product_attention_backward");
  return true;
}

#else  // built without the cuDNN frontend

bool cudnn_attention_compiled() { return false; }

bool attention_forward_cudnn(int, DType, const void*, const void*, const void*, const AttentionDims&, bool, float,
                             void*, float*, void*) {
  return false;
}

bool attention_backward_cudnn(int, DType, const void*, const void*, const void*, const void*, const void*,
                              const float*, const AttentionBackwardDims&, bool, float, void*, void*, void*, void*) {
  return false;
}

#endif

}  // namespace wick::cuda
