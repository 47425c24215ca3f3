// The CLIP text transformer: OpenAI CLIP-L/14 (quick-GELU) and OpenCLIP ViT-bigG/14 (GELU, with the
// text projection), with transformers' CLIPTextModel / CLIPTextModelWithProjection parameter names,
// for inference (frozen weights, no gradients).
//
//   clip::ClipTextConfig c{.vocab_size = 49408, .hidden_size = 768, .intermediate_size = 3072,
//                          .num_layers = 12, .num_heads = 12, .activation = "quick_gelu"};   // CLIP-L
//   auto model = std::make_shared<clip::ClipTextModel>(c);     // parameters allocated, not initialized
//   load_mapped(*model, source, format);                        // or clip::load_clip_text (clip_weights.h)
//   clip::ClipTextOutput out = model->encode(ids);              // ids [B, L <= 77] I32/I64
//   out.penultimate;   // [B, L, hidden] hidden_states[-2], before the final LayerNorm (SDXL, SD3)
//   out.pooled;        // [B, hidden] final LayerNorm output at the EOS position (Flux: CLIP-L's)
//   out.text_embeds;   // [B, projection_dim] pooled @ text_projection^T (SDXL: bigG's), if present
//
// Parameters (transformers' names): text_model.embeddings.{token_embedding, position_embedding}.weight,
// text_model.encoder.layers.N.{layer_norm1, self_attn.{q,k,v,out}_proj, layer_norm2, mlp.fc1, mlp.fc2}
// .{weight, bias}, text_model.final_layer_norm.{weight, bias}, text_projection.weight (no bias; only
// when projection_dim > 0). The maths is transformers 5.x's: embeddings = token + position rows 0..L-1;
// pre-LN blocks x += attn(LN1(x)) (causal, scale 1/sqrt(head_dim)), x += fc2(act(fc1(LN2(x))));
// last_hidden_state = final_layer_norm(x); LayerNorm eps from the config (1e-5 for every CLIP).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/module.h"

namespace wick::clip {

// Which position the pooled output is taken at, per sequence (transformers' CLIPTextTransformer):
//   Argmax:   argmax(ids) (the first on ties), the rule transformers keeps when the config's
//             eos_token_id == 2 (OpenAI's and LAION's released configs) and the one SAI's reference
//             code and open_clip's default use. With CLIP's vocabulary EOS = 49407 is the largest id,
//             so this is the first EOS.
//   FirstEos: the first position whose id == eos_token_id (transformers for any other eos_token_id);
//             a sequence without it pools position 0 (transformers' argmax over an all-false mask).
enum class ClipPooling { Argmax, FirstEos };

struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_layers = 12;
  int64_t num_heads = 12;  // head width hidden_size / num_heads (64 for CLIP-L and bigG)
  int64_t max_position_embeddings = 77;
  int64_t projection_dim = 0;             // 0: no text_projection (CLIPTextModel)
  std::string activation = "quick_gelu";  // "quick_gelu" (OpenAI CLIP-L) or "gelu" (OpenCLIP bigG, exact erf)
  double layer_norm_eps = 1e-5;
  ClipPooling pooling = ClipPooling::Argmax;
  int64_t eos_token_id = 49407;  // FirstEos looks for this id
  bool initialize = false;       // false: parameters allocated uninitialized (weights loaded next)
  DType dtype = DType::F32;      // parameter and compute dtype
  Device device = Device::cpu();

  int64_t head_dim() const { return hidden_size / num_heads; }
};

// Throws WickError (Config) naming the field when the sizes do not make a CLIP text model
// (non-positive sizes, hidden_size not a multiple of num_heads, an unknown activation).
void validate(const ClipTextConfig& config);

// The real models' configs: OpenAI CLIP ViT-L/14's text tower (768 wide, 12 layers of 12 heads, MLP
// 3072, quick-GELU, no projection: Flux, SD1.x, SDXL's first encoder) and OpenCLIP ViT-bigG/14's
// (1280 wide, 32 layers of 20 heads, MLP 5120, GELU, projection 1280: SDXL's second encoder).
ClipTextConfig clip_l_config();
ClipTextConfig clip_g_config();

// Every parameter of a ClipTextModel with `config`, by name, with its shape.
std::map<std::string, Shape> parameter_shapes(const ClipTextConfig& config);

struct ClipForwardOptions {
  bool output_hidden_states = false;  // fill ClipTextOutput::hidden_states (all n_layers + 1)
};

struct ClipTextOutput {
  Tensor last_hidden_state;  // [B, L, hidden]: final_layer_norm(output of the last layer)
  Tensor penultimate;        // [B, L, hidden]: hidden_states[-2], the input of the last layer (no final LN)
  Tensor pooled;             // [B, hidden]: last_hidden_state at the pooling position (transformers' pooler_output)
  Tensor text_embeds;        // [B, projection_dim]: text_projection(pooled); undefined without a projection
  // With output_hidden_states: transformers' hidden_states, n_layers + 1 tensors [B, L, hidden]: the
  // embeddings, then each layer's output (none has the final LayerNorm).
  std::vector<Tensor> hidden_states;
  std::vector<int64_t> pooled_positions;  // the position pooled in each sequence
};

// The pooling positions of ids [B, L] (any integer dtype, any device) under `rule`.
std::vector<int64_t> pooling_positions(const Tensor& ids, ClipPooling rule, int64_t eos_token_id);

// Children q_proj, k_proj, v_proj, out_proj (hidden -> hidden, with bias).
class ClipAttention : public Module {
 public:
  explicit ClipAttention(const ClipTextConfig& config);
  std::string type_name() const override { return "ClipAttention"; }
  // x [B, L, hidden] -> causal multi-head self-attention [B, L, hidden].
  Tensor forward(const Tensor& x) override;

 private:
  int64_t n_heads_;
};

// Children layer_norm1, self_attn, layer_norm2, mlp (fc1, fc2): a pre-LN transformer block.
class ClipEncoderLayer : public Module {
 public:
  explicit ClipEncoderLayer(const ClipTextConfig& config);
  std::string type_name() const override { return "ClipEncoderLayer"; }
  Tensor forward(const Tensor& x) override;
};

class ClipTextModel : public Module {
 public:
  // Checks the config (validate) and builds the layers in config.dtype on config.device; the
  // parameters are frozen, and left uninitialized unless config.initialize (then torch's defaults).
  explicit ClipTextModel(ClipTextConfig config);
  std::string type_name() const override { return "ClipTextModel"; }

  // ids [B, L] I32/I64 token ids, 1 <= L <= max_position_embeddings, each in [0, vocab_size) (checked,
  // WickError (Data) naming the id). Runs without recording gradients; outputs in config.dtype.
  ClipTextOutput encode(const Tensor& ids, const ClipForwardOptions& options = {});

  const ClipTextConfig& config() const { return config_; }
  bool has_projection() const { return config_.projection_dim > 0; }

 private:
  ClipTextConfig config_;
};

}  // namespace wick::clip
