// The language-model text encoders of the fixtures (tests/data/llm_prompts, tests/data/zimage_sample) are stored
// compactly: their Linear and norm tensors under model.* names, and of the embedding (the real vocabulary's 151,936
// rows) only the rows the fixtures' prompts use, as embed_rows.ids [n] I64 and embed_rows.weight [n, hidden], with the
// row count in the metadata's vocab_size. This writes the full single file a loader reads (every other row 0).
//
//   wick::testing::write_full_llm_file(data_path("zimage_sample/qwen3.safetensors"), dir + "/model.safetensors");
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "runtime/safetensors.h"
#include "runtime/tensor.h"

namespace wick::testing {

inline void write_full_llm_file(const std::string& compact, const std::string& out) {
  const SafetensorsFile stored = SafetensorsFile::open(compact);
  const int64_t vocab = std::stoll(stored.metadata().at("vocab_size"));
  const Tensor rows = stored.get("embed_rows.weight").contiguous();
  const std::vector<int64_t> ids = stored.get("embed_rows.ids").to_vector<int64_t>();
  const int64_t hidden = rows.shape()[1];
  std::vector<float> table(static_cast<size_t>(vocab * hidden), 0.0f);
  const std::vector<float> values = rows.to_vector<float>();
  for (size_t r = 0; r < ids.size(); ++r)
    std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(hidden)), hidden,
                table.begin() + static_cast<std::ptrdiff_t>(ids[r] * hidden));
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"model.embed_tokens.weight", Tensor::from_vector(table, {vocab, hidden})}};
  for (const std::string& name : stored.names())
    if (name.rfind("embed_rows.", 0) != 0) tensors.emplace_back(name, stored.get(name));
  save_safetensors(out, tensors);
}

}  // namespace wick::testing
