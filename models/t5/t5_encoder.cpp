#include "models/t5/t5_encoder.h"

#include <filesystem>
#include <limits>
#include <vector>

#include "engine/autograd/ops_layout.h"
#include "models/t5/t5_blocks.h"
#include "models/t5/t5_weights.h"
#include "runtime/error.h"

namespace wick::t5 {
namespace {

// The additive key mask [B, 1, 1, L] f32 on `device`: 0 where mask is nonzero, the lowest f32 elsewhere
// (transformers' min_dtype; added to the position bias it stays the lowest f32).
Tensor padding_bias(const Tensor& mask, Device device) {
  const std::vector<double> keep = mask.contiguous().to_vector<double>();
  std::vector<float> additive(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) additive[i] = keep[i] != 0 ? 0.0f : std::numeric_limits<float>::lowest();
  return Tensor::from_vector(additive, {mask.size(0), 1, 1, mask.size(1)}).to(device);
}

// The pipeline subfolder that holds T5: SD3's text_encoder_3, else Flux's text_encoder_2.
std::string subfolder_hint(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(std::filesystem::path(path) / "text_encoder_3", ec) ? "text_encoder_3"
                                                                                         : "text_encoder_2";
}

}  // namespace

T5Encoder::T5Encoder(T5Config config) : config_(std::move(config)) {
  validate(config_);
  register_module("shared", std::make_shared<T5Embedding>(config_.vocab_size, config_.d_model, config_));
  register_module("encoder", std::make_shared<T5Stack>(config_));
  eval();
}

std::shared_ptr<T5Encoder> T5Encoder::load(const std::string& path, const T5LoadOptions& options) {
  WeightSource source = WeightSource::open(path, subfolder_hint(path));
  DetectedFormat format = detect_weight_format(source);
  T5Config config = config_from_shapes(mapped_shapes(source, format));
  config.dtype = options.dtype;
  config.device = options.device;
  auto encoder = std::make_shared<T5Encoder>(config);
  load_mapped(*encoder, source, format);
  return encoder;
}

Tensor T5Encoder::forward(const Tensor& ids, const Tensor& mask) {
  WICK_CHECK(ids.dim() == 2 && ids.size(1) >= 1 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
             "T5Encoder: ids must be [B, L] I32/I64 with L >= 1, got ", ids.describe());
  WICK_CHECK(!mask.defined() || mask.shape() == ids.shape(), "T5Encoder: mask ", mask.defined() ? mask.describe() : "",
             " must have the ids' shape ", ids.shape());
  Tensor embeddings = autograd::to_dtype(child("shared")->forward(ids.to(config_.device)), DType::F32);
  Tensor padding = mask.defined() ? padding_bias(mask, config_.device) : Tensor();
  return static_cast<T5Stack&>(*child("encoder")).run(embeddings, padding);
}

}  // namespace wick::t5
