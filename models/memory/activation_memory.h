// Counting a training step's activation memory from what the autograd nodes keep for backward
// (engine/autograd): the profile an architecture reports (DiffusionModel::activation_profile), and
// the rules its layers share (what trains in a layer; what a Linear, plain or adapted, keeps).
//
//   ActivationShape shape{.batch = 1, .latent_height = 128, .latent_width = 128, .text_length = 512,
//                         .dtype = DType::BF16};
//   ActivationProfile p = model.activation_profile(shape, /*checkpointing=*/true);
//   int64_t peak = p.peak_bytes();                       // the activations' own high-water mark
//   LayerTrainingOf training = layer_training_of(model);  // what trains in each layer, by module path
//   LinearActivations a = linear_activations(training("blocks.0.attn.q"), rows, 128, 128, DType::BF16,
//                                            Device::cuda(0), /*input_requires_grad=*/true);
//
// The counts are exact for what the nodes keep (derived from each op's saved tensors; a view keeps
// its whole storage, and a storage is counted once), and measured for the workspace (the gradients
// and partial sums that live only for a moment): tests/models/memory_estimate_test.cpp compares
// both with memory_stats on the CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/module.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

namespace wick {

// The sizes of one micro-batch: latents [batch, C, latent_height, latent_width] (the largest bucket),
// text_length tokens of text, computed in `dtype`.
struct ActivationShape {
  int64_t batch = 1;
  int64_t latent_height = 0;
  int64_t latent_width = 0;
  int64_t text_length = 0;
  DType dtype = DType::F32;
  Device device = Device::cpu();  // where the step runs: some ops lay out their outputs by device
};

// One part of the forward, in forward order: the embedders, each block, the output layer and the loss.
struct ActivationSegment {
  std::string name;                              // "single_blocks.7"
  std::vector<std::string> parameter_prefixes;  // its parameters' names start with one of these
  // Bytes its autograd nodes keep from its forward until its backward. With gradient checkpointing,
  // a checkpointed block keeps only its inputs here; `recomputed` is what its recomputation keeps
  // during its own backward. Segments that are not checkpointed have recomputed = 0.
  int64_t kept = 0;
  int64_t recomputed = 0;
  // Bytes held only for a moment at the worst point of its forward or backward (gradients in
  // flight, partial sums), above `kept` + `recomputed`.
  int64_t workspace = 0;
  // Multiply-adds x 2 of its forward (its Linears and attention); 0 where the profile does not count
  // them. The memory plan's time estimates (models/memory/memory_plan.h) read them.
  int64_t forward_flops = 0;
};

struct ActivationProfile {
  std::vector<ActivationSegment> segments;
  bool checkpointing = false;

  // The activations' high-water mark: at segment k (forward or backward) every earlier segment's
  // `kept`, plus its own kept, recomputed and workspace.
  int64_t peak_bytes() const;
  // Every segment's forward_flops.
  int64_t forward_flops() const;
  // Every segment's kept bytes: what the forward leaves for backward.
  int64_t kept_bytes() const;
};

// How one layer of a model trains.
struct LayerTraining {
  bool trainable = false;  // its own weight (or norm scale) is trained (network full)
  int64_t rank = 0;        // the rank of its LoRA / DoRA adapter; 0 = none
  bool dora = false;
  double dropout = 0.0;    // the adapter's dropout on its input
  bool trains() const { return trainable || rank > 0; }
};

// What trains in a model's layer, by module path ("double_blocks.0.img_attn.qkv"); an unknown path
// is a frozen layer.
using LayerTrainingOf = std::function<LayerTraining(const std::string& module_path)>;

// From a built model: an adapter's rank, type and dropout, else whether the module's own
// parameters require a gradient.
LayerTrainingOf layer_training_of(const Module& model);

// What one Linear (in -> out features, `rows` rows) keeps and holds for a moment, in bytes, with
// activations in `dtype` (the compute dtype) on `device`, and trainable weights in f32:
//   plain, trainable: its input;  frozen: nothing;
//   LoRA: its input, the [rows, r] down-projection, and in a 16-bit compute dtype the factors'
//     copies in that dtype (the down and up nodes keep them); for a moment the base output, the
//     update and the scaled update ([rows, out] each) besides the sum; with dropout the dropped copy
//     and its u8 mask instead of the input;
//   DoRA: its input, the combined weight W + s·up·down in f32 (kept by the norm's product) and the
//     effective weight in the compute dtype (kept by the linear node): (4 + element_bytes)·out·in.
struct LinearActivations {
  bool adapter = false;              // LoRA / DoRA
  bool keeps_input = false;          // its input (or a view of it) is kept
  bool output_requires_grad = false;
  int64_t kept = 0;                  // bytes kept besides its input
  int64_t transient = 0;             // bytes alive when its output is made, the output included
  int64_t flops = 0;                 // 2·rows·in·out, plus the adapter's low-rank products
};
LinearActivations linear_activations(const LayerTraining& training, int64_t rows, int64_t in, int64_t out, DType dtype,
                                     Device device, bool input_requires_grad);

// The f32 staging of a [rows, in] x [in, out] product: the CPU multiplies 16-bit operands in f32
// (runtime/ops/matmul.cpp), so both operands and the result are f32 copies for a moment; 0 elsewhere.
int64_t matmul_staging(int64_t rows, int64_t in, int64_t out, DType dtype, Device device);
// The bytes per element of the arithmetic: f32 for 16-bit dtypes on the CPU, else the dtype's.
int64_t math_bytes(DType dtype, Device device);

// A segment's bytes, counted in forward order by the architectures' profiles: `input`, the block's
// inputs that its own nodes keep (a checkpoint keeps them anyway); `internal`, everything else its
// nodes keep; `held`, what the block's locals hold until it returns; and the forward's high-water
// mark of internal + held + a moment's transients.
struct ActivationCount {
  int64_t input = 0, internal = 0, held = 0, forward_peak = 0;
  int64_t flops = 0;     // the forward's multiply-adds x 2 (Linears; attention added by the profile)
  bool adapted = false;  // one of its Linears carries an adapter
  void keep(bool kept, int64_t bytes);
  void hold(int64_t bytes) { held += bytes; }
  // A moment with `transient` more bytes alive.
  void note(int64_t transient);
  // A Linear: what it keeps, and the moment its output is made.
  void linear(const LinearActivations& a);
  // The forward's high-water mark above what the segment keeps.
  int64_t forward_excess() const;
};

// A stream of tokens between a transformer's blocks: its rows and whether it requires a gradient.
struct TokenStream {
  int64_t rows;
  bool requires_grad;
};

// A block's workspace in rows of its widest tensor at the arithmetic's element size (math_bytes): the highest point
// of its forward or backward above what it keeps, with adapters (their base and low-rank paths' gradients) and
// without; each architecture's profile says what it measured.
struct WorkspaceRows {
  double adapted, plain;
};

// The "final_layer" segment of a transformer whose last layer is BFL's LastLayer (Flux.1, FLUX.2: adaLN_modulation.1
// on SiLU(vec) -> (shift, scale), a LayerNorm of the last stream's image rows, (1 + scale) · x + shift, linear), with
// the flow-matching loss on its prediction. `x` is the last stream (text and image rows) and whether it requires a
// gradient; vec_grad whether vec does.
struct FinalLayerSizes {
  int64_t batch = 0, img_rows = 0, hidden = 0, out_features = 0;
  DType dtype = DType::F32;
  Device device = Device::cpu();
};
ActivationSegment adaln_final_layer_segment(const LayerTrainingOf& of, const FinalLayerSizes& sizes,
                                            const TokenStream& x, bool vec_grad);

// A checkpointable block's segment from its count `c`: without checkpointing it keeps its inputs (c.input) and its
// internals; with checkpointing the checkpoint node keeps only `input_bytes`, and the recomputation in backward keeps
// the internals and makes the outputs again (`output_bytes`) while the outputs' gradients wait. Its workspace: `rows`
// (adapted when c.adapted) of `widest` bytes, or the forward's excess when that is larger.
ActivationSegment block_segment(const std::string& name, const ActivationCount& c, bool checkpointing,
                                int64_t input_bytes, int64_t output_bytes, int64_t widest, const WorkspaceRows& rows);

// A two-layer embedder MLP (Linear in -> width, SiLU, Linear width -> width, the layers training as `first` and
// `second`) on [batch, in] rows in `dtype` on `device`, counted into `c`. Returns whether its output requires a
// gradient.
bool count_embedder_mlp(ActivationCount& c, const LayerTraining& first, const LayerTraining& second, int64_t batch,
                        int64_t in, int64_t width, DType dtype, Device device);

// What scaled_dot_product_attention holds for a moment besides its output: on the CPU in a 16-bit
// dtype, f32 copies of q, k, v and an f32 output (it computes in f32); nothing elsewhere.
int64_t attention_transient(int64_t q_rows, int64_t kv_rows, int64_t width, DType dtype, Device device);

// Whether merging attention's heads, [B, H, L, D] -> [B, L, H·D], copies its output
// (runtime/ops/attention.cpp): not for one head, nor where the output takes q's memory order
// ([B, L, H, D] for heads split from a projection) — the CPU in f32/f64 and cuDNN (16-bit, no mask,
// head_dim a multiple of 8 up to 128); the CPU's 16-bit cast and the CUDA kernel write [B, H, L, D].
bool attention_merge_copies(int64_t heads, int64_t head_dim, DType dtype, Device device, bool masked);

}  // namespace wick
