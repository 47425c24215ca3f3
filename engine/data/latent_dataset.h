// The cached-latent dataset: one HDF5 file of latents, text embeddings, captions and labels in
// resolution buckets (schema: docs/dataset.md).
//
//   LatentDatasetWriter w("data/x.h5", {.model_family = "flux", .latent_channels = 16, ...});
//   w.append(samples);                       // LatentSamples: tensors [n, ...], captions, labels
//   w.close();
//   auto ds = LatentDataset::open("data/x.h5");       // read-only, file locking off; checks the schema
//   ValidationReport r = ds->validate();               // reads everything: NaN/Inf, dtypes, index
//   LatentSamples s = ds->read({3, 17, 5});           // by sample id, all in one bucket
//   if (auto prompts = ds->sample_prompts()) use(prompts->captions, prompts->embeds);   // optional
//
// Optional per-sample members (docs/dataset.md): latents_logvar (then `latents` holds the VAE's mean),
// original_size, crop, flipped, source; each is given in every append or in none.
//
// Every failure throws WickError (kind Data) naming the file and the HDF5 object. HDF5 calls are
// serialized by one process-wide mutex (the serial HDF5 library is not thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace wick {

inline constexpr const char* latent_format_name = "wick-latents";
inline constexpr int64_t latent_format_version = 1;

struct LatentDatasetAttributes {
  std::string model_family;
  int64_t latent_channels = 0;
  double vae_scaling_factor = 1.0;
  double vae_shift_factor = 0.0;
  // Optional per-channel normalization, applied after the scalar one: x0 = (x - mean[c]) / std[c]
  // (the Wan VAE's latents_mean / latents_std, Qwen-Image). Both latent_channels long, or both empty
  // (= absent: old files and the AutoencoderKL models).
  std::vector<double> vae_latents_mean;
  std::vector<double> vae_latents_std;
  std::string text_encoder;  // optional ("" = not recorded)
  // Optional, what made text/embeds and text/pooled ("t5-xxl", "clip-l", ...; "" = not recorded) and
  // the token length the embeddings were padded to (0 = not recorded): Flux is trained and sampled
  // with the same T5 length (docs/dataset.md).
  std::string text_embeds_encoder;
  std::string text_pooled_encoder;
  int64_t text_max_length = 0;
  // Optional: the trigger word `wick dataset encode` put into the captions ([trigger] replaced, or prepended where
  // absent); "" = none or not recorded.
  std::string trigger_word;
  std::vector<std::string> label_names;  // optional (/label_names)
};

// What is wrong with the per-channel normalization attributes (vae_latents_mean / vae_latents_std): one without
// the other, a length other than latent_channels, a value not finite, a std <= 0. Empty: none, or both fine.
std::vector<std::string> latent_normalization_problems(const LatentDatasetAttributes& attributes);

// A group of samples of one bucket. Tensors are CPU; floating tensors of any float dtype on write
// (stored f16), f32 on read; integer tensors of any integer dtype on write. Optional members are
// undefined (or empty) when the file has none.
struct LatentSamples {
  Tensor latents;         // [n, C, H, W]: the latent, or the VAE's mean when latents_logvar is defined
  Tensor latents_logvar;  // [n, C, H, W]: the VAE's log-variance (optional)
  Tensor text_embeds;     // [n, L, D]
  Tensor text_pooled;     // [n, P]
  Tensor text_mask;       // u8 [n, L]
  std::vector<std::string> captions;  // n
  Tensor labels;          // i64 [n] (optional)
  Tensor original_size;   // i64 [n, 2]: (height, width) of the source image (optional)
  Tensor crop;            // i64 [n, 2]: (top, left) of the crop in the resized image (optional)
  Tensor flipped;         // u8 [n]: 1 when mirrored left-right (optional)
  std::vector<std::string> sources;  // n: the image's path relative to its folder (optional: empty)
  std::vector<int64_t> ids;  // sample ids (filled by read and by append)
  int64_t size() const { return static_cast<int64_t>(captions.size()); }
};

// The config's sample prompts, encoded when the dataset was made (root group /sample_prompts), so that
// sampling during training needs no text encoder. L, D and P are the dataset's.
struct SamplePrompts {
  std::vector<std::string> captions;  // K
  Tensor embeds;                      // f32 [K, L, D] on read (any float dtype on write)
  Tensor pooled;                      // f32 [K, P]
  Tensor mask;                        // u8 [K, L]
};

// Where LatentDataset::read_into puts samples (row-major, n = ids.size()): the required pointers must
// not be null; an optional one may be null (not read), and is not written when the file lacks it.
struct SampleBuffers {
  float* latents = nullptr;         // n*C*H*W
  float* text_embeds = nullptr;     // n*L*D
  float* text_pooled = nullptr;     // n*P
  uint8_t* text_mask = nullptr;     // n*L
  float* latents_logvar = nullptr;  // n*C*H*W (optional)
  int64_t* labels = nullptr;        // n; -1 when the file has none (optional)
  int64_t* original_size = nullptr; // n*2 (optional)
  int64_t* crop = nullptr;          // n*2 (optional)
  uint8_t* flipped = nullptr;       // n (optional)
  std::vector<std::string>* captions = nullptr;  // replaced by n captions (optional)
  std::vector<std::string>* sources = nullptr;   // replaced by n sources (optional)
};

struct BucketInfo {
  std::string name;  // "<H>x<W>"
  int64_t height = 0, width = 0;
  int64_t n_samples = 0;
};

class LatentDatasetWriter {
 public:
  // Creates (truncates) `path`. attributes.latent_channels > 0 and model_family non-empty.
  LatentDatasetWriter(const std::string& path, const LatentDatasetAttributes& attributes);
  ~LatentDatasetWriter();
  LatentDatasetWriter(const LatentDatasetWriter&) = delete;
  LatentDatasetWriter& operator=(const LatentDatasetWriter&) = delete;

  // Appends n samples to the bucket of their latent size (created on first use) and returns their
  // sample ids. Shapes: latents and latents_logvar [n, C, H, W] with C = latent_channels; L, D, P
  // equal to the first append's; each optional member (labels, latents_logvar, original_size, crop,
  // flipped, sources) given either in every append or in none.
  std::vector<int64_t> append(const LatentSamples& samples);
  // Writes /sample_prompts (at most once). Its L, D and P must be those of the samples (checked when
  // both are known, here or at the next append).
  void set_sample_prompts(const SamplePrompts& prompts);
  int64_t n_samples() const;
  // Writes the sample index and bucket names and closes the file; the destructor calls it.
  void close();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct ValidationReport {
  std::vector<std::string> errors;  // empty = valid
  int64_t n_samples = 0;
  double latent_mean = 0.0, latent_std = 0.0;  // over every latent element
  std::vector<std::string> dtypes;  // "buckets/14x14/latents: f16", ...
  bool ok() const { return errors.empty(); }
};

class LatentDataset {
 public:
  // Opens read-only and checks the structure (docs/dataset.md "Opening and validation"). First reads
  // the whole file (open, validate, every string) in a child process with a time and memory limit, so
  // that a file that crashes or hangs libhdf5 is refused (Data) without wick touching it
  // (docs/troubleshooting.md "A damaged or hostile file"; WICK_DATASET_CHECK=0 skips this).
  static std::shared_ptr<LatentDataset> open(const std::string& path);
  ~LatentDataset();
  LatentDataset(const LatentDataset&) = delete;
  LatentDataset& operator=(const LatentDataset&) = delete;

  const std::string& path() const;
  const LatentDatasetAttributes& attributes() const;
  const std::vector<BucketInfo>& buckets() const;
  int64_t size() const;  // number of sample ids
  int64_t text_length() const;  // L
  int64_t text_dim() const;     // D
  int64_t pooled_dim() const;   // P
  bool has_labels() const;
  // Which optional per-sample members the file holds (in every bucket).
  bool has_logvar() const;         // latents_logvar: `latents` is the VAE's mean
  bool has_original_size() const;
  bool has_crop() const;
  bool has_flipped() const;
  bool has_sources() const;
  // /sample_prompts, read from the file (nullopt when it has none).
  std::optional<SamplePrompts> sample_prompts() const;
  // Bucket number and row of sample `id` (0 <= id < size()).
  int64_t bucket_of(int64_t id) const;
  int64_t row_of(int64_t id) const;
  int64_t label_of(int64_t id) const;  // -1 without labels

  // Reads samples (all of one bucket) as CPU tensors: floats f32, mask and flipped u8, labels,
  // original_size and crop i64; every optional member the file holds.
  LatentSamples read(const std::vector<int64_t>& ids) const;
  // Same, into caller buffers (the prefetcher's pinned buffers); see SampleBuffers.
  void read_into(const std::vector<int64_t>& ids, const SampleBuffers& out) const;

  // Full content check; never throws for content problems (they go into the report).
  ValidationReport validate() const;

 private:
  LatentDataset();
  static void check_in_child(const std::string& path);  // throws WickError (Data) on a bad file
  static std::shared_ptr<LatentDataset> open_in_process(const std::string& path);
  void read_every_string() const;  // captions and sources of every sample
  struct State;
  std::unique_ptr<State> state_;
};

// Eligible sample ids under a label filter: include empty = all labels; exclude wins over include.
struct ClassFilter {
  std::vector<int64_t> include, exclude;
  bool empty() const { return include.empty() && exclude.empty(); }
};
// Resolves label names (case-insensitive, through /label_names) or decimal numbers to labels;
// unknown names throw WickError (Config) listing the valid names.
std::vector<int64_t> resolve_labels(const LatentDataset& dataset, const std::vector<std::string>& names);
// The ids passing the filter, ascending. A non-empty filter on a file without labels throws (Data).
std::vector<int64_t> select_ids(const LatentDataset& dataset, const ClassFilter& filter);

}  // namespace wick
