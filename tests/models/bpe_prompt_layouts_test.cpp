// The diffusion pipelines' prompt layouts (models/bpe/prompt_layouts.h) against tests/data/bpe/prompt_layouts
// .safetensors: the ids diffusers 0.42's pipelines give their text encoders (apply_chat_template or the template
// string, then the tokenizer call with the pipeline's truncation and padding; see the README), for 90 prompts
// of every corpus kind, the empty prompt and prompts past the maximum length.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "models/bpe/prompt_layouts.h"
#include "tests/models/bpe_test_util.h"

namespace wick::bpe {
namespace {

struct LayoutFixtures {
  std::vector<std::string> prompts;
  std::map<std::string, Rows> rows;  // the real (unpadded) ids per layout
  int64_t n_image_tokens = 0;
};

const LayoutFixtures& layouts() {
  static const LayoutFixtures f = [] {
    LayoutFixtures out;
    out.prompts = read_json(bpe_data_dir() + "/prompts.json").get<std::vector<std::string>>();
    SafetensorsFile file = SafetensorsFile::open(bpe_data_dir() + "/prompt_layouts.safetensors");
    for (const char* name : {"zimage", "klein", "qwenimage", "qwenimage_edit", "qwenimage_edit_plus", "flux2"})
      out.rows[name] = rows_of(file, name);
    out.n_image_tokens = 16;  // the file's metadata "n_image_tokens"
    return out;
  }();
  return f;
}

// What `layout` must be for reference row `want`: padded to `length` (0: unpadded) with pad_id on one side.
std::string compare(const PromptTokens& got, const std::vector<int32_t>& want, int64_t length, int32_t pad_id,
                    bool pad_left) {
  std::vector<int32_t> ids = want, mask(want.size(), 1);
  if (length > 0) {
    size_t n_pad = static_cast<size_t>(length) - want.size();
    ids.insert(pad_left ? ids.begin() : ids.end(), n_pad, pad_id);
    mask.insert(pad_left ? mask.begin() : mask.end(), n_pad, 0);
  }
  if (got.ids != ids) return "ids\n    got  " + show_ids(got.ids) + "\n    want " + show_ids(ids);
  if (got.mask != mask) return "mask";
  if (got.n_real() != static_cast<int64_t>(want.size())) return "n_real";
  return "";
}

size_t check_layout(const char* name, const std::function<PromptTokens(const std::string&)>& make, int64_t length,
                    int32_t pad_id, bool pad_left) {
  const LayoutFixtures& f = layouts();
  const Rows& rows = f.rows.at(name);
  // The edit layouts (never truncated) leave out the last, longest prompt.
  const bool edit = std::string(name).rfind("qwenimage_edit", 0) == 0;
  EXPECT_EQ(rows.size(), f.prompts.size() - (edit ? 1 : 0)) << name;
  size_t bad = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string diff = compare(make(f.prompts[i]), rows[i], length, pad_id, pad_left);
    if (!diff.empty() && bad++ < 4)
      std::printf("  %s #%zu %s: %s\n", name, i, nlohmann::json(f.prompts[i]).dump().substr(0, 80).c_str(), diff.c_str());
  }
  std::printf("%s: %zu of %zu prompts equal\n", name, rows.size() - bad, rows.size());
  return bad;
}

const QwenTokenizer& qwen3() {
  static const QwenTokenizer t = QwenTokenizer::from_folder(bpe_data_dir() + "/qwen3");
  return t;
}

const QwenTokenizer& qwen25() {
  static const QwenTokenizer t = [] {
    TempDir dir = qwen_image_folder();
    return QwenTokenizer::from_folder(dir.path());
  }();
  return t;
}

TEST(BpePromptLayouts, ZImage) {
  EXPECT_EQ(check_layout("zimage", [](const std::string& p) { return zimage_prompt(qwen3(), p); }, 512, 151643, false),
            0u);
  PromptTokens z = zimage_prompt(qwen3(), "A cat");
  // MODELS2 1.4's ids, except that "Ġcat" (8251) and "assistant" (77091) are past this vocabulary's 6,000
  // merges ("Ġc" "at" here; BpeTokenizer.FullVocabularies checks the real ids).
  EXPECT_EQ(std::vector<int32_t>(z.ids.begin(), z.ids.begin() + 9),
            (std::vector<int32_t>{151644, 872, 198, 32, 272, 266, 151645, 198, 151644}));
  EXPECT_EQ(z.ids[static_cast<size_t>(z.n_real()) - 1], 198);
  EXPECT_EQ(z.ids[static_cast<size_t>(z.n_real())], 151643);
  EXPECT_EQ(z.first_kept(), 0);
  EXPECT_EQ(z.n_kept(), z.n_real());
  PromptTokens empty = zimage_prompt(qwen3(), "");
  EXPECT_EQ(empty.n_real(), z.n_real() - 3);  // "A", "Ġc", "at" fewer
  EXPECT_EQ(std::vector<int32_t>(empty.ids.begin(), empty.ids.begin() + 6),
            (std::vector<int32_t>{151644, 872, 198, 151645, 198, 151644}));
}

TEST(BpePromptLayouts, Flux2Klein) {
  EXPECT_EQ(check_layout("klein", [](const std::string& p) { return flux2_klein_prompt(qwen3(), p); }, 512, 151643,
                         false), 0u);
  PromptTokens k = flux2_klein_prompt(qwen3(), "A cat");
  PromptTokens z = zimage_prompt(qwen3(), "A cat");
  ASSERT_EQ(k.n_real(), z.n_real() + 4);  // "<think>" "\n\n" "</think>" "\n\n"
  EXPECT_EQ(k.ids[static_cast<size_t>(z.n_real())], 151667);
  EXPECT_EQ(k.ids[static_cast<size_t>(z.n_real()) + 2], 151668);
}

TEST(BpePromptLayouts, QwenImage) {
  EXPECT_EQ(check_layout("qwenimage", [](const std::string& p) { return qwen_image_prompt(qwen25(), p); }, 0, 0, false),
            0u);
  // The drop and keep counts (MODELS2 2.4's 41 tokens / 7 kept for "A cat" need the full vocabulary: there the
  // 34 dropped ids are exactly the system block and "<|im_start|>user\n"; BpeTokenizer.FullVocabularies).
  PromptTokens q = qwen_image_prompt(qwen25(), "A cat");
  PromptTokens empty = qwen_image_prompt(qwen25(), "");
  EXPECT_EQ(q.n_drop, 34);
  EXPECT_EQ(q.n_keep, 512);
  EXPECT_EQ(q.first_kept(), 34);
  EXPECT_EQ(q.n_kept(), static_cast<int64_t>(q.ids.size()) - 34);
  EXPECT_EQ(q.ids.size(), empty.ids.size() + 3);  // "A", "Ġc", "at"
  // The template after the prompt ("<|im_end|>\n<|im_start|>assistant\n") is the same with or without one.
  EXPECT_EQ(std::vector<int32_t>(q.ids.end() - 6, q.ids.end()), std::vector<int32_t>(empty.ids.end() - 6, empty.ids.end()));
  EXPECT_EQ(q.ids[q.ids.size() - 7], qwen25().im_end_id());  // "assistant" is three ids in this vocabulary
  // The longest prompt: truncated to 1024 + 34, and the pipeline keeps 512 rows after the drop.
  PromptTokens longest = qwen_image_prompt(qwen25(), layouts().prompts.back());
  EXPECT_EQ(longest.ids.size(), 1058u);
  EXPECT_EQ(longest.n_kept(), 512);
  // A batch pads on the right with <|endoftext|>, as tokenizer(..., padding=True).
  std::vector<PromptTokens> batch = pad_batch({q, longest}, qwen25().endoftext_id());
  EXPECT_EQ(batch[0].ids.size(), 1058u);
  EXPECT_EQ(batch[0].ids[q.ids.size()], 151643);
  EXPECT_EQ(batch[0].mask[q.ids.size()], 0);
  EXPECT_EQ(batch[0].n_real(), static_cast<int64_t>(q.ids.size()));
  EXPECT_EQ(batch[0].n_kept(), q.n_kept());
}

TEST(BpePromptLayouts, QwenImageEdit) {
  const int64_t n = layouts().n_image_tokens;
  EXPECT_EQ(check_layout("qwenimage_edit",
                         [&](const std::string& p) { return qwen_image_edit_prompt(qwen25(), p, n); }, 0, 0, false),
            0u);
  PromptTokens e = qwen_image_edit_prompt(qwen25(), "A cat", n);
  EXPECT_EQ(e.n_drop, 64);
  const auto image_pad = std::count(e.ids.begin(), e.ids.end(), qwen25().token_id("<|image_pad|>"));
  EXPECT_EQ(image_pad, n);
  EXPECT_EQ(e.n_kept(), static_cast<int64_t>(e.ids.size()) - 64);
  EXPECT_EQ(e.n_keep, -1);  // the edit pipelines do not cut to max_sequence_length
  // The longest prompt is kept whole (no truncation).
  const std::string& longest = layouts().prompts.back();
  EXPECT_EQ(qwen_image_edit_prompt(qwen25(), longest, n).n_kept(),
            static_cast<int64_t>(qwen_image_edit_prompt(qwen25(), longest, n).ids.size()) - 64);
  EXPECT_GT(qwen_image_edit_prompt(qwen25(), longest, n).ids.size(), 1058u);
  EXPECT_THAT(wick::testing::error_of([] { qwen_image_edit_prompt(qwen25(), "x", 0); }),
              ::testing::HasSubstr("n_image_tokens"));
}

TEST(BpePromptLayouts, QwenImageEditPlus) {
  const std::vector<int64_t> images = {16, 8};  // the fixture's 112x112 and 112x56 images
  EXPECT_EQ(check_layout("qwenimage_edit_plus",
                         [&](const std::string& p) { return qwen_image_edit_plus_prompt(qwen25(), p, images); }, 0, 0,
                         false), 0u);
  PromptTokens e = qwen_image_edit_plus_prompt(qwen25(), "A cat", images);
  EXPECT_EQ(e.n_drop, 64);
  EXPECT_EQ(e.n_keep, -1);
  EXPECT_EQ(std::count(e.ids.begin(), e.ids.end(), qwen25().token_id("<|image_pad|>")), 24);
  EXPECT_EQ(std::count(e.ids.begin(), e.ids.end(), qwen25().token_id("<|vision_start|>")), 2);
  // No images: the template with the prompt alone.
  PromptTokens none = qwen_image_edit_plus_prompt(qwen25(), "A cat", {});
  EXPECT_EQ(std::count(none.ids.begin(), none.ids.end(), qwen25().token_id("<|vision_start|>")), 0);
}

TEST(BpePromptLayouts, Flux2Dev) {
  TekkenTokenizer tekken = TekkenTokenizer::from_file(bpe_data_dir() + "/tekken.json");
  EXPECT_EQ(check_layout("flux2", [&](const std::string& p) { return flux2_dev_prompt(tekken, p); }, 512, 11, true),
            0u);
  PromptTokens f = flux2_dev_prompt(tekken, "A cat");
  const size_t first = 512 - static_cast<size_t>(f.n_real());
  EXPECT_EQ(f.ids[0], 11);
  EXPECT_EQ(f.mask[0], 0);
  EXPECT_EQ(f.ids[first], 1);       // <s>
  EXPECT_EQ(f.ids[first + 1], 17);  // [SYSTEM_PROMPT]
  EXPECT_EQ(f.ids.back(), 4);       // [/INST]
  EXPECT_EQ(f.first_kept(), static_cast<int64_t>(first));
  // "[IMG]" is removed from the prompt in one pass, as str.replace.
  EXPECT_EQ(flux2_dev_prompt(tekken, "a [IMG]cat").ids, flux2_dev_prompt(tekken, "a cat").ids);
  PromptTokens formed = flux2_dev_prompt(tekken, "[IM[IMG]G]");  // leaves "[IMG]", which is then a token
  EXPECT_EQ(std::count(formed.ids.begin(), formed.ids.end(), 10), 1);
}

}  // namespace
}  // namespace wick::bpe
