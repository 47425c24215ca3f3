// The cached-latent dataset: one HDF5 file of latents, text embeddings, captions and labels in
// resolution buckets (schema: docs/dataset.md).
//
//   LatentDatasetWriter w("data/x.h5", {.model_family = "flux", .latent_channels = 16, ...});
//   w.append(samples);                       // LatentSamples: tensors [n, ...], captions, labels
//   w.close();
//   auto ds = LatentDataset::open("data/x.h5");       // read-only, file locking off; checks the schema
//   ValidationReport r = ds->validate();               // reads everything: NaN/Inf, dtypes, index
//   LatentSamples s = ds->read({3, 17, 5});           // by sample id, all in one bucket
//
// Every failure throws WickError (kind Data) naming the file and the HDF5 object. HDF5 calls are
// serialized by one process-wide mutex (the serial HDF5 library is not thread-safe).
#pragma once

#include <cstdint>
#include <memory>
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
  std::string text_encoder;              // optional ("" = not recorded)
  // Optional, what made text/embeds and text/pooled ("t5-xxl", "clip-l", ...; "" = not recorded) and
  // the token length the embeddings were padded to (0 = not recorded): Flux is trained and sampled
  // with the same T5 length (docs/dataset.md).
  std::string text_embeds_encoder;
  std::string text_pooled_encoder;
  int64_t text_max_length = 0;
  std::vector<std::string> label_names;  // optional (/label_names)
};

// A group of samples of one bucket. Tensors are CPU; floating tensors of any float dtype on write
// (stored f16), f32 on read.
struct LatentSamples {
  Tensor latents;      // [n, C, H, W]
  Tensor text_embeds;  // [n, L, D]
  Tensor text_pooled;  // [n, P]
  Tensor text_mask;    // u8 [n, L]
  std::vector<std::string> captions;  // n
  Tensor labels;       // i64 [n]; undefined when the file has none
  std::vector<int64_t> ids;  // sample ids (filled by read and by append)
  int64_t size() const { return static_cast<int64_t>(captions.size()); }
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
  // sample ids. Shapes: latents [n, C, H, W] with C = latent_channels; L, D, P equal to the first
  // append's; labels given either in every append or in none.
  std::vector<int64_t> append(const LatentSamples& samples);
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
  // Opens read-only and checks the structure (docs/dataset.md "Opening and validation").
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
  // Bucket number and row of sample `id` (0 <= id < size()).
  int64_t bucket_of(int64_t id) const;
  int64_t row_of(int64_t id) const;
  int64_t label_of(int64_t id) const;  // -1 without labels

  // Reads samples (all of one bucket) as CPU tensors: floats f32, mask u8, labels i64.
  LatentSamples read(const std::vector<int64_t>& ids) const;
  // Same, writing floats into caller buffers of the right sizes (used by the prefetcher's pinned
  // buffers): latents n*C*H*W, embeds n*L*D, pooled n*P, mask n*L, labels n (may be null).
  void read_into(const std::vector<int64_t>& ids, float* latents, float* embeds, float* pooled, uint8_t* mask,
                 int64_t* labels, std::vector<std::string>* captions) const;

  // Full content check; never throws for content problems (they go into the report).
  ValidationReport validate() const;

 private:
  LatentDataset();
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
