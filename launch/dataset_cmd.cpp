// `wick dataset pack fashion-mnist --out FILE [--split train|test] [--limit N] [--force]` and
// `wick dataset inspect FILE` (docs/dataset.md); `wick dataset encode` is launch/dataset_encode_cmd.cpp.
#include <cstdio>
#include <memory>
#include <string>

#include "engine/data/fashion_pack.h"
#include "engine/data/latent_dataset.h"
#include "launch/commands.h"
#include "runtime/error.h"

namespace wick::launch {
namespace {

struct PackArgs {
  std::string source, out, split = "train";
  int64_t limit = 0;
  bool force = false;
};

void run_pack(const PackArgs& args) {
  PackSummary summary = pack_fashion_mnist({.out = args.out, .split = args.split, .limit = args.limit,
                                            .force = args.force});
  std::printf("wrote %s: %lld samples (fashion-mnist %s) in %.1fs\n", args.out.c_str(),
              static_cast<long long>(summary.n_samples), args.split.c_str(), summary.seconds);
}

void run_inspect(const std::string& path) {
  std::shared_ptr<LatentDataset> dataset;
  try {
    dataset = LatentDataset::open(path);
  } catch (const WickError& error) {
    std::printf("%s: INVALID\n  %s\n", path.c_str(), error.what());
    set_exit_status(3);
    return;
  }
  const LatentDatasetAttributes& a = dataset->attributes();
  std::printf("%s\n", path.c_str());
  std::printf("  format            wick-latents v1\n");
  std::printf("  model_family      %s\n", a.model_family.c_str());
  std::printf("  latent_channels   %lld\n", static_cast<long long>(a.latent_channels));
  std::printf("  vae scaling/shift %g / %g\n", a.vae_scaling_factor, a.vae_shift_factor);
  if (!a.vae_latents_mean.empty() || !a.vae_latents_std.empty()) {
    auto list = [](const std::vector<double>& values) {
      std::string text;
      for (double v : values) text += (text.empty() ? "" : " ") + std::to_string(v).substr(0, 8);
      return text;
    };
    std::printf("  vae latents_mean  %s\n  vae latents_std   %s\n", list(a.vae_latents_mean).c_str(),
                list(a.vae_latents_std).c_str());
  }
  std::printf("  text_encoder      %s\n", a.text_encoder.empty() ? "(not recorded)" : a.text_encoder.c_str());
  if (!a.text_embeds_encoder.empty()) std::printf("  text/embeds from  %s\n", a.text_embeds_encoder.c_str());
  if (!a.text_pooled_encoder.empty()) std::printf("  text/pooled from  %s\n", a.text_pooled_encoder.c_str());
  if (a.text_max_length > 0) std::printf("  text_max_length   %lld\n", static_cast<long long>(a.text_max_length));
  if (!a.trigger_word.empty()) std::printf("  trigger_word      %s\n", a.trigger_word.c_str());
  std::printf("  text              L=%lld D=%lld pooled P=%lld\n", static_cast<long long>(dataset->text_length()),
              static_cast<long long>(dataset->text_dim()), static_cast<long long>(dataset->pooled_dim()));
  std::printf("  labels            %s", dataset->has_labels() ? "yes" : "no");
  if (!a.label_names.empty()) {
    std::printf(" (%zu names:", a.label_names.size());
    for (const auto& name : a.label_names) std::printf(" \"%s\"", name.c_str());
    std::printf(")");
  }
  std::printf("\n  latents           %s\n",
              dataset->has_logvar() ? "the VAE's mean, with latents_logvar (training draws mean + exp(logvar/2)*eps "
                                      "unless dataset.latent_sampling is mean)"
                                    : "as stored");
  std::string members;
  for (const auto& [present, name] : {std::pair{dataset->has_original_size(), "original_size"},
                                      {dataset->has_crop(), "crop"}, {dataset->has_flipped(), "flipped"},
                                      {dataset->has_sources(), "source"}})
    if (present) members += std::string(members.empty() ? "" : ", ") + name;
  std::printf("  per sample        %s\n", members.empty() ? "(no original_size, crop, flipped, source)" : members.c_str());
  if (auto prompts = dataset->sample_prompts()) {
    std::printf("  sample prompts    %zu, embeds [%lld, %lld, %lld]\n", prompts->captions.size(),
                static_cast<long long>(prompts->embeds.size(0)), static_cast<long long>(prompts->embeds.size(1)),
                static_cast<long long>(prompts->embeds.size(2)));
    for (const auto& caption : prompts->captions) std::printf("    \"%s\"\n", caption.c_str());
  }
  std::printf("  samples           %lld\n  buckets\n", static_cast<long long>(dataset->size()));
  for (const BucketInfo& bucket : dataset->buckets())
    std::printf("    %-10s %8lld samples  latents [N, %lld, %lld, %lld]\n", bucket.name.c_str(),
                static_cast<long long>(bucket.n_samples), static_cast<long long>(a.latent_channels),
                static_cast<long long>(bucket.height), static_cast<long long>(bucket.width));
  if (dataset->size() > 0) {
    LatentSamples first = dataset->read({0});
    std::printf("  sample 0          caption \"%s\"", first.captions[0].c_str());
    if (dataset->has_labels()) std::printf(", label %lld", static_cast<long long>(dataset->label_of(0)));
    if (!first.sources.empty()) std::printf(", source \"%s\"", first.sources[0].c_str());
    if (first.original_size.defined()) {
      const auto size = first.original_size.to_vector<int64_t>();
      std::printf(", original %lldx%lld", static_cast<long long>(size[0]), static_cast<long long>(size[1]));
    }
    if (first.crop.defined()) {
      const auto crop = first.crop.to_vector<int64_t>();
      std::printf(", crop (%lld, %lld)", static_cast<long long>(crop[0]), static_cast<long long>(crop[1]));
    }
    if (first.flipped.defined() && first.flipped.to_vector<uint8_t>()[0] != 0) std::printf(", flipped");
    std::printf("\n");
  }
  ValidationReport report = dataset->validate();
  std::printf("  dtypes\n");
  for (const auto& line : report.dtypes) std::printf("    %s\n", line.c_str());
  std::printf("  latents           mean %.4f std %.4f\n", report.latent_mean, report.latent_std);
  if (report.ok()) {
    std::printf("  validation        OK (%lld samples, all finite)\n", static_cast<long long>(report.n_samples));
    return;
  }
  std::printf("  validation        INVALID (%zu problems)\n", report.errors.size());
  for (const auto& error : report.errors) std::printf("    %s: %s\n", path.c_str(), error.c_str());
  set_exit_status(3);
}

}  // namespace

void add_dataset_command(CLI::App& app) {
  CLI::App* dataset = app.add_subcommand("dataset", "Build and check cached-latent datasets (docs/dataset.md)");
  dataset->require_subcommand(1);

  auto pack_args = std::make_shared<PackArgs>();
  CLI::App* pack = dataset->add_subcommand("pack", "Pack a known dataset into a cached-latent HDF5 file");
  pack->add_option("source", pack_args->source, "what to pack")->required()->check(CLI::IsMember({"fashion-mnist"}));
  pack->add_option("--out", pack_args->out, "output file, e.g. data/fashion.h5")->required();
  pack->add_option("--split", pack_args->split, "train or test")->check(CLI::IsMember({"train", "test"}));
  pack->add_option("--limit", pack_args->limit, "pack only the first N images (0 = all)")->check(CLI::NonNegativeNumber);
  pack->add_flag("--force", pack_args->force, "replace an existing output file");
  pack->callback([pack_args] { run_pack(*pack_args); });

  auto inspect_path = std::make_shared<std::string>();
  CLI::App* inspect = dataset->add_subcommand("inspect", "Validate and summarize a cached-latent file (exit 3 if invalid)");
  inspect->add_option("file", *inspect_path, "the .h5 file")->required();
  inspect->callback([inspect_path] { run_inspect(*inspect_path); });

  add_dataset_encode_command(*dataset);
}

}  // namespace wick::launch
