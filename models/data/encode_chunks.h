// The work folder of `wick dataset encode` (<out>.partial/, docs/dataset.md "Resuming"): the plan, and
// per chunk of images what the VAE made and what the text encoders made. Every file is a safetensors
// file written to a temporary name, fsynced and renamed (save_safetensors), so a file that exists is
// whole: a chunk is finished exactly when both of its files exist.
//
//   EncodeWorkDir dir("data/photos.h5.partial");
//   dir.write_plan(plan);                        // plan.safetensors; read_plan() gives it back
//   dir.write_latents(12, chunk);                // chunk_000012.latents.safetensors
//   if (auto done = dir.read_latents(12)) ...;   // nullopt when missing or unreadable (then redone)
//   dir.write_text(12, text);                    // chunk_000012.text.safetensors
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/buckets.h"
#include "runtime/tensor.h"

namespace wick::encode {

// One sample of a chunk: an image of the folder, fitted to its bucket (and maybe mirrored).
struct ChunkSample {
  int64_t image = 0;       // index in the folder's sorted image list
  std::string source;      // path relative to the folder
  std::string caption;
  BucketPlacement placement;
};

// What the VAE made of one chunk.
struct LatentChunk {
  std::vector<ChunkSample> samples;   // in order: images in folder order, a flipped copy after its image
  std::vector<Tensor> mean, logvar;   // per sample, f16 [C, h, w]; logvar empty when only the mean is kept
  std::vector<std::string> skipped;   // images of the chunk left out: "<path>: <reason>"
  int64_t latent_channels = 0;
  double scaling_factor = 1.0, shift_factor = 0.0;
  std::vector<double> channel_mean, channel_std;  // per-channel normalization (ImageVaeInfo); empty = none
};

// What the text encoders made of one chunk: one row per distinct caption.
struct TextChunk {
  Tensor embeds;                 // f16 [U, L, D]
  Tensor pooled;                 // f16 [U, P]
  Tensor mask;                   // u8 [U, L]
  std::vector<int64_t> row_of;   // per sample of the chunk: its row
  std::string embeds_encoder, pooled_encoder;
  int64_t max_length = 0;
};

// The encoded sample prompts.
struct PromptChunk {
  std::vector<std::string> captions;
  Tensor embeds, pooled, mask;  // f16 [K, L, D], f16 [K, P], u8 [K, L]
};

class EncodeWorkDir {
 public:
  explicit EncodeWorkDir(std::string path);
  const std::string& path() const { return path_; }
  bool exists() const;
  void create() const;   // with parents; WickError (Config) naming it when that fails
  void remove() const;   // everything in it, and the folder
  int64_t n_committed_chunk_files() const;  // chunk_*.safetensors files in it (finished work)

  // The plan (a JSON text) that a resumed run must match.
  void write_plan(const std::string& plan) const;
  std::optional<std::string> read_plan() const;  // nullopt: no plan file

  std::string latents_file(int64_t chunk) const;  // <path>/chunk_000012.latents.safetensors
  std::string text_file(int64_t chunk) const;
  std::string prompts_file() const;               // <path>/sample_prompts.safetensors
  std::string merged_file() const;                // <path>/merged.h5

  void write_latents(int64_t chunk, const LatentChunk& latents) const;
  // nullopt when the file is missing; a file that does not read back (a disk error) also gives nullopt,
  // with `warning` set, so that the chunk is encoded again.
  std::optional<LatentChunk> read_latents(int64_t chunk, std::string* warning = nullptr) const;
  void write_text(int64_t chunk, const TextChunk& text) const;
  std::optional<TextChunk> read_text(int64_t chunk, std::string* warning = nullptr) const;
  void write_prompts(const PromptChunk& prompts) const;
  std::optional<PromptChunk> read_prompts(std::string* warning = nullptr) const;

 private:
  std::string path_;
};

}  // namespace wick::encode
