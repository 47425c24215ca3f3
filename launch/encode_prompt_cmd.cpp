// `wick encode-prompt --model flux|sd3|sdxl (--path PIPELINE_FOLDER | --clip-l F [--clip-g F] [--t5 F]
// --clip-vocab P [--clip-g-vocab P] [--t5-tokenizer P]) --prompt TEXT [--prompt ...] [--t5-length N]
// [--clip-l-pooled projected|unprojected] [--zeros-for-empty-prompt] [--device cpu|cuda] [--dtype f32|bf16]
// [--batch-size N] --out FILE.safetensors`: what the model takes from its text encoders (models/flux/flux_text.h,
// models/sd3/sd3_text.h, models/sdxl/sdxl_text.h), written to a safetensors file.
//
//   wick encode-prompt --model flux --path FLUX.1-dev --prompt "a photo of a cat" --device cuda --out cat.safetensors
//   wick encode-prompt --model sd3 --clip-l clip_l.safetensors --clip-g clip_g.safetensors --t5 t5xxl_fp16.safetensors
//        --clip-vocab bpe_simple_vocab_16e6.txt.gz --t5-tokenizer spiece.model --clip-l-pooled unprojected
//        --prompt "a cat" --prompt "" --out sd3.safetensors
//
// The file holds context [N, L, D], pooled [N, P], mask [N, L] (I64) and the token ids (clip_l_ids, clip_g_ids,
// t5_ids, t5_mask: those of the encoders used), in the encoders' dtype; its metadata holds the prompts (JSON) and
// every choice (PromptEncodingInfo::metadata: model, lengths, pad ids, pooling choice, dtype, files), plus
// wick_version. Exit status 2 for a bad command line, 3 for a missing or wrong tokenizer or weights file.
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/commands.h"
#include "models/text/model_prompts.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "wick/build_info.h"

namespace wick::launch {
namespace {

struct EncodePromptArgs {
  std::string model, path, out, device = "cpu", dtype, clip_l_pooled = "projected";
  text::TextEncoderFiles files;
  std::vector<std::string> prompts;
  int64_t t5_length = 0;  // 0: the model's default (Flux 512, SD3 256)
  int64_t batch_size = 8;
  bool zeros_for_empty_prompt = false;
};

std::string shape_text(const Tensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape().size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape()[i]);
  return s + "] " + dtype_name(t.dtype());
}

text::PromptEmbeddings encode(const EncodePromptArgs& args, const text::EncoderLoading& loading) {
  const text::ModelPromptEncoder encoder({.model = args.model,
                                          .pipeline = args.path,
                                          .files = args.files,
                                          .loading = loading,
                                          .t5_length = args.t5_length,
                                          .clip_l_pooled = args.clip_l_pooled,
                                          .zeros_for_empty_prompt = args.zeros_for_empty_prompt,
                                          .batch_size = args.batch_size});
  return encoder.encode(args.prompts);
}

void run_encode_prompt(const EncodePromptArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  text::EncoderLoading loading{.device = parse_device(args.device)};
  if (loading.device.is_cuda())
    WICK_CHECK_KIND(Config, cuda_device_count() > loading.device.index, "encode-prompt: --device ", args.device,
                    ": no such CUDA device (", cuda_device_count(), " visible)");
  if (!args.dtype.empty()) loading.dtype = parse_dtype(args.dtype);
  std::fprintf(stderr, "wick encode-prompt: %s, %zu prompt%s, %s on %s\n", args.model.c_str(), args.prompts.size(),
               args.prompts.size() == 1 ? "" : "s", dtype_name(loading.compute_dtype()), loading.device.str().c_str());

  const text::PromptEmbeddings e = encode(args, loading);
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"context", e.context.to(Device::cpu())}, {"pooled", e.pooled.to(Device::cpu())}, {"mask", e.mask}};
  tensors.insert(tensors.end(), e.tokens.begin(), e.tokens.end());
  std::map<std::string, std::string> metadata = e.info.metadata();
  metadata["format"] = "pt";
  metadata["prompts"] = nlohmann::json(args.prompts).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  metadata["wick_version"] = std::string(WICK_VERSION) + " (" + WICK_GIT_COMMIT + ")";
  save_safetensors(args.out, tensors, metadata);

  for (const auto& [step, seconds] : e.timings) std::printf("  %-14s %8.3f s\n", step.c_str(), seconds);
  std::printf("context  %s\npooled   %s\nmask     %s\n", shape_text(e.context).c_str(), shape_text(e.pooled).c_str(),
              shape_text(e.mask).c_str());
  std::printf("text_embeds_encoder \"%s\", text_pooled_encoder \"%s\", text_max_length %lld\n",
              e.info.embeds_encoder.c_str(), e.info.pooled_encoder.c_str(), static_cast<long long>(e.info.max_length));
  std::printf("wrote %s in %.2f s\n", args.out.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void add_encode_prompt_command(CLI::App& app) {
  auto args = std::make_shared<EncodePromptArgs>();
  CLI::App* cmd = app.add_subcommand(
      "encode-prompt", "Encode prompts as Flux, SD3 or SDXL takes them from its text encoders (a safetensors file)");
  cmd->add_option("--model", args->model, "flux (T5 512 for dev, --t5-length 256 for schnell), sd3 or sdxl")
      ->required()
      ->check(CLI::IsMember({"flux", "sd3", "sdxl"}));
  CLI::Option* path =
      cmd->add_option("--path", args->path, "diffusers pipeline folder (tokenizer*/ and text_encoder*/)");
  CLI::Option* clip_l =
      cmd->add_option("--clip-l", args->files.clip_l, "CLIP-L weights (e.g. ComfyUI clip_l.safetensors)");
  CLI::Option* clip_g = cmd->add_option("--clip-g", args->files.clip_g, "CLIP-G (bigG) weights (sd3, sdxl)");
  CLI::Option* t5 = cmd->add_option("--t5", args->files.t5, "T5-XXL weights (flux, sd3; e.g. t5xxl_fp16.safetensors)");
  CLI::Option* vocab = cmd->add_option(
      "--clip-vocab", args->files.clip_vocab,
      "CLIP vocabulary: a tokenizer folder (vocab.json + merges.txt) or open_clip's bpe_simple_vocab_16e6.txt.gz");
  CLI::Option* vocab_g = cmd->add_option("--clip-g-vocab", args->files.clip_g_vocab,
                                         "bigG's own tokenizer folder (default: --clip-vocab padded with \"!\")");
  CLI::Option* spiece =
      cmd->add_option("--t5-tokenizer", args->files.t5_tokenizer, "T5's spiece.model, or a folder holding it");
  for (CLI::Option* file : {clip_l, clip_g, t5, vocab, vocab_g, spiece}) path->excludes(file);
  cmd->add_option("--prompt", args->prompts, "prompt to encode (repeatable; \"\" allowed)")
      ->required()
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--t5-length", args->t5_length, "T5 tokens (default: flux 512, sd3 256)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--clip-l-pooled", args->clip_l_pooled,
                  "sd3: CLIP-L's pooled vector projected (diffusers, kohya) or unprojected (SAI, ComfyUI)")
      ->capture_default_str()
      ->check(CLI::IsMember({"projected", "unprojected"}));
  cmd->add_flag("--zeros-for-empty-prompt", args->zeros_for_empty_prompt,
                "sdxl: \"\" prompts get zero embeddings (diffusers' force_zeros_for_empty_prompt)");
  cmd->add_option("--device", args->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "f32 or bf16 (default: bf16 on cuda, f32 on cpu)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--batch-size", args->batch_size, "prompts per encoder call")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--out", args->out, "safetensors file to write")->required();
  cmd->callback([args] { run_encode_prompt(*args); });
}

}  // namespace wick::launch
