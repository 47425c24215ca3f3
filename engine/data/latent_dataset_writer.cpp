// LatentDatasetWriter (engine/data/latent_dataset.h): appends samples bucket by bucket, writes the
// sample index and bucket names at close (schema: docs/dataset.md).
#include <algorithm>
#include <filesystem>

#include "engine/data/latent_dataset.h"

#if WICK_HAS_HDF5
#include "engine/data/hdf5_util.h"
#endif

namespace wick {

#if WICK_HAS_HDF5
using h5::H5Id;
using h5::H5Lock;

namespace {

std::string bucket_path(const std::string& bucket, const std::string& member) {
  return "buckets/" + bucket + "/" + member;
}

// Rows per chunk of the small per-sample datasets (pooled, mask, captions, labels, placement);
// latents and embeddings have one sample per chunk.
constexpr int64_t kSmallChunkRows = 1024;

// An optional member is given in every append or in none: `state` is -1 until the first append.
bool consistent(int& state, bool given, const char* name) {
  if (state < 0) state = given ? 1 : 0;
  WICK_CHECK(given == (state == 1), "LatentDatasetWriter::append: ", name,
             " must be given in every append or in none");
  return given;
}

void append_strings(hid_t dataset, const std::vector<std::string>& values, int64_t n_before, const std::string& file,
                    const std::string& name) {
  std::vector<const char*> texts;
  for (const std::string& value : values) texts.push_back(value.c_str());
  h5::append_rows(dataset, h5::vlen_string_type(), texts.data(), n_before, static_cast<int64_t>(texts.size()), {},
                  file, name);
}

}  // namespace

struct LatentDatasetWriter::State {
  struct Bucket {
    std::string name;
    int64_t height = 0, width = 0, n = 0;
    H5Id latents, logvar, embeds, pooled, mask, captions, labels, original_size, crop, flipped, sources;
  };
  std::string path;
  LatentDatasetAttributes attributes;
  H5Id file;
  std::vector<Bucket> buckets;
  std::vector<int64_t> index;  // (bucket, row) pairs
  int64_t text_length = -1, text_dim = -1, pooled_dim = -1;
  // Optional members: -1 unknown until the first append, then 0 or 1.
  int has_labels = -1, has_logvar = -1, has_original_size = -1, has_crop = -1, has_flipped = -1, has_sources = -1;
  int64_t prompts_length = -1, prompts_dim = -1, prompts_pooled = -1;  // of /sample_prompts once written
  bool closed = false;

  void check_prompt_shapes() const {
    if (prompts_length < 0 || text_length < 0) return;
    WICK_CHECK(prompts_length == text_length && prompts_dim == text_dim && prompts_pooled == pooled_dim,
               "LatentDatasetWriter: sample prompts have L=", prompts_length, " D=", prompts_dim, " P=",
               prompts_pooled, ", the samples L=", text_length, " D=", text_dim, " P=", pooled_dim);
  }
};

LatentDatasetWriter::LatentDatasetWriter(const std::string& path, const LatentDatasetAttributes& attributes)
    : state_(std::make_unique<State>()) {
  WICK_CHECK(attributes.latent_channels > 0, "LatentDatasetWriter: latent_channels must be > 0");
  WICK_CHECK(!attributes.model_family.empty(), "LatentDatasetWriter: model_family must be set");
  H5Lock lock;
  state_->path = path;
  state_->attributes = attributes;
  // A chunk cache of 16 MiB per dataset holds a whole chunk of the small datasets (1024 rows of a
  // 4096-wide f16 pooled vector is 8 MiB), so appending a few rows at a time never re-reads a chunk.
  H5Id access(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), path, "/", "H5Pcreate"));
  H5_CHECK(H5Pset_cache(access.get(), 0, 12421, size_t{16} << 20, 1.0), path, "/", "H5Pset_cache");
  state_->file = H5Id(H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()), path, "/",
                               "creating the file (H5Fcreate)"));
  hid_t root = state_->file.get();
  h5::write_string_attribute(root, "format", latent_format_name, path);
  h5::write_int_attribute(root, "format_version", latent_format_version, path);
  h5::write_string_attribute(root, "model_family", attributes.model_family, path);
  h5::write_int_attribute(root, "latent_channels", attributes.latent_channels, path);
  h5::write_float_attribute(root, "vae_scaling_factor", attributes.vae_scaling_factor, path);
  h5::write_float_attribute(root, "vae_shift_factor", attributes.vae_shift_factor, path);
  // As given (validate() checks them, as it checks the latents): an empty vector is no attribute.
  if (!attributes.vae_latents_mean.empty())
    h5::write_float_array_attribute(root, "vae_latents_mean", attributes.vae_latents_mean, path);
  if (!attributes.vae_latents_std.empty())
    h5::write_float_array_attribute(root, "vae_latents_std", attributes.vae_latents_std, path);
  if (!attributes.text_encoder.empty()) h5::write_string_attribute(root, "text_encoder", attributes.text_encoder, path);
  if (!attributes.text_embeds_encoder.empty())
    h5::write_string_attribute(root, "text_embeds_encoder", attributes.text_embeds_encoder, path);
  if (!attributes.text_pooled_encoder.empty())
    h5::write_string_attribute(root, "text_pooled_encoder", attributes.text_pooled_encoder, path);
  if (attributes.text_max_length > 0) h5::write_int_attribute(root, "text_max_length", attributes.text_max_length, path);
  if (!attributes.trigger_word.empty()) h5::write_string_attribute(root, "trigger_word", attributes.trigger_word, path);
  H5Gclose(H5_CHECK(H5Gcreate2(root, "buckets", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path, "/buckets",
                    "H5Gcreate2"));
}

LatentDatasetWriter::~LatentDatasetWriter() {
  try {
    close();
  } catch (...) {
    // A destructor must not throw; call close() explicitly to see the error.
  }
}

int64_t LatentDatasetWriter::n_samples() const { return static_cast<int64_t>(state_->index.size() / 2); }

std::vector<int64_t> LatentDatasetWriter::append(const LatentSamples& samples) {
  State& s = *state_;
  WICK_CHECK(!s.closed, "LatentDatasetWriter::append: ", s.path, " is closed");
  const std::string op = "LatentDatasetWriter::append: ";
  int64_t n = samples.size();
  WICK_CHECK(samples.latents.defined() && samples.latents.dim() == 4, op, "latents must be [n, C, H, W]");
  WICK_CHECK(samples.latents.size(0) == n && samples.latents.size(1) == s.attributes.latent_channels, op,
             "latents ", samples.latents.describe(), " for ", n, " captions and latent_channels ",
             s.attributes.latent_channels);
  WICK_CHECK(samples.text_embeds.defined() && samples.text_embeds.dim() == 3 && samples.text_embeds.size(0) == n, op,
             "text_embeds must be [n, L, D]");
  int64_t L = samples.text_embeds.size(1), D = samples.text_embeds.size(2);
  WICK_CHECK(samples.text_pooled.defined() && samples.text_pooled.dim() == 2 && samples.text_pooled.size(0) == n, op,
             "text_pooled must be [n, P]");
  int64_t P = samples.text_pooled.size(1);
  WICK_CHECK(samples.text_mask.defined() && samples.text_mask.shape() == Shape({n, L}), op, "text_mask must be [n, ",
             L, "], got ", samples.text_mask.describe());
  if (s.text_length < 0) {
    s.text_length = L;
    s.text_dim = D;
    s.pooled_dim = P;
  }
  WICK_CHECK(L == s.text_length && D == s.text_dim && P == s.pooled_dim, op, "text shapes L=", L, " D=", D, " P=", P,
             " differ from the first append's L=", s.text_length, " D=", s.text_dim, " P=", s.pooled_dim);
  s.check_prompt_shapes();
  const bool labelled = consistent(s.has_labels, samples.labels.defined(), "labels");
  const bool logvar = consistent(s.has_logvar, samples.latents_logvar.defined(), "latents_logvar");
  const bool original = consistent(s.has_original_size, samples.original_size.defined(), "original_size");
  const bool cropped = consistent(s.has_crop, samples.crop.defined(), "crop");
  const bool flipped = consistent(s.has_flipped, samples.flipped.defined(), "flipped");
  const bool sourced = consistent(s.has_sources, !samples.sources.empty(), "sources");
  if (labelled) WICK_CHECK(samples.labels.shape() == Shape({n}), op, "labels must be [n]");
  if (logvar)
    WICK_CHECK(samples.latents_logvar.shape() == samples.latents.shape(), op, "latents_logvar ",
               samples.latents_logvar.describe(), " must have the shape of latents ", samples.latents.describe());
  if (original) WICK_CHECK(samples.original_size.shape() == Shape({n, 2}), op, "original_size must be [n, 2]");
  if (cropped) WICK_CHECK(samples.crop.shape() == Shape({n, 2}), op, "crop must be [n, 2]");
  if (flipped) WICK_CHECK(samples.flipped.shape() == Shape({n}), op, "flipped must be [n]");
  if (sourced) WICK_CHECK(samples.size() == static_cast<int64_t>(samples.sources.size()), op, samples.sources.size(),
                          " sources for ", n, " samples");
  for (const Tensor* t : {&samples.latents, &samples.latents_logvar, &samples.text_embeds, &samples.text_pooled,
                          &samples.text_mask, &samples.labels, &samples.original_size, &samples.crop, &samples.flipped})
    if (t->defined()) WICK_CHECK(t->device().is_cpu(), op, "tensors must be on the CPU, got ", t->describe());

  int64_t C = s.attributes.latent_channels, H = samples.latents.size(2), W = samples.latents.size(3);
  std::string name = std::to_string(H) + "x" + std::to_string(W);
  H5Lock lock;
  const std::string& path = s.path;
  auto found = std::find_if(s.buckets.begin(), s.buckets.end(), [&](const State::Bucket& b) { return b.name == name; });
  if (found == s.buckets.end()) {
    State::Bucket bucket;
    bucket.name = name;
    bucket.height = H;
    bucket.width = W;
    hid_t root = s.file.get();
    auto create = [&](const std::string& member, hid_t type, const std::vector<int64_t>& row, int64_t chunk) {
      return h5::create_rows(root, bucket_path(name, member), type, row, chunk, path);
    };
    bucket.latents = create("latents", h5::f16_type(), {C, H, W}, 1);
    if (logvar) bucket.logvar = create("latents_logvar", h5::f16_type(), {C, H, W}, 1);
    bucket.embeds = create("text/embeds", h5::f16_type(), {L, D}, 1);
    bucket.pooled = create("text/pooled", h5::f16_type(), {P}, kSmallChunkRows);
    bucket.mask = create("text/mask", H5T_STD_U8LE, {L}, kSmallChunkRows);
    bucket.captions = create("captions", h5::vlen_string_type(), {}, kSmallChunkRows);
    if (labelled) bucket.labels = create("labels", H5T_STD_I64LE, {}, kSmallChunkRows);
    if (original) bucket.original_size = create("original_size", H5T_STD_I64LE, {2}, kSmallChunkRows);
    if (cropped) bucket.crop = create("crop", H5T_STD_I64LE, {2}, kSmallChunkRows);
    if (flipped) bucket.flipped = create("flipped", H5T_STD_U8LE, {}, kSmallChunkRows);
    if (sourced) bucket.sources = create("source", h5::vlen_string_type(), {}, kSmallChunkRows);
    s.buckets.push_back(std::move(bucket));
    found = s.buckets.end() - 1;
  }
  State::Bucket& bucket = *found;
  int64_t bucket_number = found - s.buckets.begin();
  auto write = [&](const H5Id& dataset, const Tensor& values, DType dtype, hid_t mem_type,
                   const std::vector<int64_t>& row, const char* member) {
    Tensor converted = values.to(dtype).contiguous();
    h5::append_rows(dataset.get(), mem_type, converted.data(), bucket.n, n, row, path, bucket_path(name, member));
  };
  write(bucket.latents, samples.latents, DType::F16, h5::f16_type(), {C, H, W}, "latents");
  if (logvar) write(bucket.logvar, samples.latents_logvar, DType::F16, h5::f16_type(), {C, H, W}, "latents_logvar");
  write(bucket.embeds, samples.text_embeds, DType::F16, h5::f16_type(), {L, D}, "text/embeds");
  write(bucket.pooled, samples.text_pooled, DType::F16, h5::f16_type(), {P}, "text/pooled");
  write(bucket.mask, samples.text_mask, DType::U8, H5T_NATIVE_UINT8, {L}, "text/mask");
  append_strings(bucket.captions.get(), samples.captions, bucket.n, path, bucket_path(name, "captions"));
  if (labelled) write(bucket.labels, samples.labels, DType::I64, H5T_NATIVE_INT64, {}, "labels");
  if (original) write(bucket.original_size, samples.original_size, DType::I64, H5T_NATIVE_INT64, {2}, "original_size");
  if (cropped) write(bucket.crop, samples.crop, DType::I64, H5T_NATIVE_INT64, {2}, "crop");
  if (flipped) write(bucket.flipped, samples.flipped, DType::U8, H5T_NATIVE_UINT8, {}, "flipped");
  if (sourced) append_strings(bucket.sources.get(), samples.sources, bucket.n, path, bucket_path(name, "source"));
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) {
    ids.push_back(n_samples());
    s.index.push_back(bucket_number);
    s.index.push_back(bucket.n + i);
  }
  bucket.n += n;
  return ids;
}

void LatentDatasetWriter::set_sample_prompts(const SamplePrompts& prompts) {
  State& s = *state_;
  const std::string op = "LatentDatasetWriter::set_sample_prompts: ";
  WICK_CHECK(!s.closed, op, s.path, " is closed");
  WICK_CHECK(s.prompts_length < 0, op, "the sample prompts of ", s.path, " are already written");
  const auto k = static_cast<int64_t>(prompts.captions.size());
  WICK_CHECK(k > 0, op, "no prompts");
  WICK_CHECK(prompts.embeds.defined() && prompts.embeds.dim() == 3 && prompts.embeds.size(0) == k, op,
             "embeds must be [K, L, D] for ", k, " captions");
  const int64_t L = prompts.embeds.size(1), D = prompts.embeds.size(2);
  WICK_CHECK(prompts.pooled.defined() && prompts.pooled.dim() == 2 && prompts.pooled.size(0) == k, op,
             "pooled must be [K, P]");
  WICK_CHECK(prompts.mask.defined() && prompts.mask.shape() == Shape({k, L}), op, "mask must be [K, L]");
  for (const Tensor* t : {&prompts.embeds, &prompts.pooled, &prompts.mask})
    WICK_CHECK(t->device().is_cpu(), op, "tensors must be on the CPU, got ", t->describe());
  s.prompts_length = L;
  s.prompts_dim = D;
  s.prompts_pooled = prompts.pooled.size(1);
  s.check_prompt_shapes();
  const int64_t P = s.prompts_pooled;
  H5Lock lock;
  hid_t root = s.file.get();
  const std::string& path = s.path;
  H5Id captions = h5::create_rows(root, "sample_prompts/captions", h5::vlen_string_type(), {}, 64, path);
  append_strings(captions.get(), prompts.captions, 0, path, "sample_prompts/captions");
  Tensor embeds = prompts.embeds.to(DType::F16).contiguous(), pooled = prompts.pooled.to(DType::F16).contiguous(),
         mask = prompts.mask.to(DType::U8).contiguous();
  H5Id embeds_set = h5::create_rows(root, "sample_prompts/embeds", h5::f16_type(), {L, D}, 1, path);
  h5::append_rows(embeds_set.get(), h5::f16_type(), embeds.data(), 0, k, {L, D}, path, "sample_prompts/embeds");
  H5Id pooled_set = h5::create_rows(root, "sample_prompts/pooled", h5::f16_type(), {P}, 64, path);
  h5::append_rows(pooled_set.get(), h5::f16_type(), pooled.data(), 0, k, {P}, path, "sample_prompts/pooled");
  H5Id mask_set = h5::create_rows(root, "sample_prompts/mask", H5T_STD_U8LE, {L}, 64, path);
  h5::append_rows(mask_set.get(), H5T_NATIVE_UINT8, mask.data(), 0, k, {L}, path, "sample_prompts/mask");
}

void LatentDatasetWriter::close() {
  State& s = *state_;
  if (s.closed) return;
  s.closed = true;
  H5Lock lock;
  hid_t root = s.file.get();
  H5Id index = h5::create_rows(root, "sample_index", H5T_STD_I64LE, {2}, 4096, s.path);
  h5::append_rows(index.get(), H5T_NATIVE_INT64, s.index.data(), 0, n_samples(), {2}, s.path, "sample_index");
  H5Id names = h5::create_rows(root, "bucket_names", h5::vlen_string_type(), {}, 64, s.path);
  std::vector<std::string> bucket_names;
  for (const auto& bucket : s.buckets) bucket_names.push_back(bucket.name);
  append_strings(names.get(), bucket_names, 0, s.path, "bucket_names");
  if (!s.attributes.label_names.empty()) {
    H5Id labels = h5::create_rows(root, "label_names", h5::vlen_string_type(), {}, 64, s.path);
    append_strings(labels.get(), s.attributes.label_names, 0, s.path, "label_names");
  }
  s.buckets.clear();
  H5_CHECK(H5Fflush(root, H5F_SCOPE_GLOBAL), s.path, "/", "H5Fflush");
  s.file.reset();
}

#else  // built without HDF5

struct LatentDatasetWriter::State {};
namespace {
[[noreturn]] void no_hdf5(const std::string& path) {
  WICK_FAIL(Data, path, ": this wick was built without HDF5 (install libhdf5-dev and re-run cmake)");
}
}  // namespace
LatentDatasetWriter::LatentDatasetWriter(const std::string& path, const LatentDatasetAttributes&) { no_hdf5(path); }
LatentDatasetWriter::~LatentDatasetWriter() = default;
std::vector<int64_t> LatentDatasetWriter::append(const LatentSamples&) { no_hdf5(""); }
void LatentDatasetWriter::set_sample_prompts(const SamplePrompts&) { no_hdf5(""); }
int64_t LatentDatasetWriter::n_samples() const { return 0; }
void LatentDatasetWriter::close() {}
#endif

}  // namespace wick
