// `wick encode-prompt --model MODEL (--path PIPELINE_FOLDER | --clip-l F [--clip-g F] [--t5 F] --clip-vocab P ...)
// --prompt TEXT [--prompt ...] [the model's prompt options] [--device cpu|cuda] [--dtype f32|bf16] [--batch-size N]
// --out FILE.safetensors`: what the model takes from its text encoders (its Architecture::make_prompt_encoder), written
// to a safetensors file. The file options and prompt options are every encodable architecture's (launch/prompt_args.h):
// --t5-length (flux, sd3), --clip-l-pooled (sd3), --zeros-for-empty-prompt (sdxl), ...
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
#include "launch/prompt_args.h"
#include "models/registry.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "wick/build_info.h"

namespace wick::launch {
namespace {

struct EncodePromptArgs {
  std::string model, out, device = "cpu", dtype;
  PromptArgs text;
  std::vector<std::string> prompts;
  int64_t batch_size = 8;
};

std::string shape_text(const Tensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape().size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape()[i]);
  return s + "] " + dtype_name(t.dtype());
}

text::PromptEmbeddings encode(const EncodePromptArgs& args, const text::EncoderLoading& loading) {
  const Architecture& arch = find_encodable_architecture(args.model, "encode-prompt: --model");
  text::PromptEncoderRequest request = prompt_request(args.text, arch);
  request.loading = loading;
  request.batch_size = args.batch_size;
  return arch.make_prompt_encoder(request)->encode(args.prompts);
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
  std::vector<std::string> models;
  for (const Architecture* arch : encodable_architectures()) models.push_back(arch->name());
  CLI::App* cmd = app.add_subcommand(
      "encode-prompt", "Encode prompts as a model takes them from its text encoders (a safetensors file)");
  cmd->add_option("--model", args->model, encodable_architecture_names())->required()->check(CLI::IsMember(models));
  add_prompt_args(*cmd, args->text);
  cmd->add_option("--prompt", args->prompts, "prompt to encode (repeatable; \"\" allowed)")
      ->required()
      ->allow_extra_args(false)
      ->take_all();
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
