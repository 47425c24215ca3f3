#include "engine/data/latent_dataset.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <optional>

#if WICK_HAS_HDF5
#include "engine/data/hdf5_util.h"
#endif

namespace wick {

#if WICK_HAS_HDF5
using h5::H5Id;
using h5::H5Lock;

namespace {

const std::vector<std::string> kRequired = {"latents", "text/embeds", "text/pooled", "text/mask", "captions"};

std::string bucket_path(const std::string& bucket, const std::string& member) {
  return "buckets/" + bucket + "/" + member;
}

bool parse_bucket_name(const std::string& name, int64_t& height, int64_t& width) {
  size_t x = name.find('x');
  if (x == std::string::npos || x == 0 || x + 1 >= name.size()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (i != x && !std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  height = std::stoll(name.substr(0, x));
  width = std::stoll(name.substr(x + 1));
  return height > 0 && width > 0;
}

bool is_f16(hid_t dataset) {
  H5Id type(H5Dget_type(dataset));
  return H5Tget_class(type.get()) == H5T_FLOAT && H5Tget_size(type.get()) == 2;
}

// Reads rows of a float dataset into f32: f16 files are read as raw halves and converted here
// (exact); other float types are converted by HDF5.
void read_float_rows(hid_t dataset, bool f16, float* out, int64_t start, int64_t n,
                     const std::vector<int64_t>& row_shape, const std::string& file, const std::string& name) {
  if (!f16) {
    h5::read_rows(dataset, H5T_NATIVE_FLOAT, out, start, n, row_shape, file, name);
    return;
  }
  int64_t count = n;
  for (int64_t extent : row_shape) count *= extent;
  std::vector<uint16_t> halves(static_cast<size_t>(count));
  h5::read_rows(dataset, h5::f16_type(), halves.data(), start, n, row_shape, file, name);
  for (int64_t i = 0; i < count; ++i) out[i] = f16_to_f32(halves[static_cast<size_t>(i)]);
}

}  // namespace

// ---------------------------------------------------------------- reader

struct LatentDataset::State {
  struct Bucket {
    BucketInfo info;
    H5Id latents, logvar, embeds, pooled, mask, captions, labels, original_size, crop, flipped, sources;
    bool latents_f16 = true, logvar_f16 = true, embeds_f16 = true, pooled_f16 = true;
  };
  std::string path;
  LatentDatasetAttributes attributes;
  H5Id file;
  std::vector<Bucket> buckets;
  std::vector<BucketInfo> infos;
  std::vector<int64_t> bucket_of, row_of, labels;
  int64_t text_length = 0, text_dim = 0, pooled_dim = 0;
  bool has_labels = false;
  // Optional members present in every bucket (checked by open).
  bool has_logvar = false, has_original_size = false, has_crop = false, has_flipped = false, has_sources = false;
  int64_t n_prompts = -1;  // rows of /sample_prompts, -1 without it

  // The phases of open_in_process, in order, on the open file's root group; each checks what it
  // reads and throws WickError (Data) naming the file and the member.
  void read_root_attributes(hid_t root);                          // format, version, attributes, label names
  std::vector<std::string> read_bucket_names(hid_t root) const;  // /bucket_names
  // Every bucket's members: shapes, types, the optional members present in all buckets or none.
  void open_buckets(hid_t root, const std::vector<std::string>& bucket_names);
  void read_sample_index(hid_t root, const std::vector<std::string>& bucket_names);  // bucket_of, row_of
  void read_sample_prompts(hid_t root);  // n_prompts, when the file holds /sample_prompts
  void read_labels();                    // labels, -1 without them
};

LatentDataset::LatentDataset() : state_(std::make_unique<State>()) {}
LatentDataset::~LatentDataset() {
  H5Lock lock;
  state_.reset();
}

std::shared_ptr<LatentDataset> LatentDataset::open(const std::string& path) {
  WICK_CHECK_KIND(Data, std::filesystem::exists(path), path, ": no such file");
  WICK_CHECK_KIND(Data, std::filesystem::is_regular_file(path), path, ": not a regular file");
  check_in_child(path);
  return open_in_process(path);
}

void LatentDataset::read_every_string() const {
  const State& s = *state_;
  H5Lock lock;
  const int64_t block = 4096;
  for (const State::Bucket& bucket : s.buckets) {
    for (int64_t start = 0; start < bucket.info.n_samples; start += block) {
      const int64_t n = std::min(block, bucket.info.n_samples - start);
      h5::read_strings(bucket.captions.get(), start, n, s.path, bucket_path(bucket.info.name, "captions"));
      if (bucket.sources.valid())
        h5::read_strings(bucket.sources.get(), start, n, s.path, bucket_path(bucket.info.name, "source"));
    }
  }
}

// ---- the phases of open_in_process, in order; `s` is this state, as open_in_process names it ----

void LatentDataset::State::read_root_attributes(hid_t root) {
  State& s = *this;
  const std::string& path = s.path;
  std::string format = h5::read_string_attribute(root, "format", path);
  WICK_CHECK_KIND(Data, format == latent_format_name, path, ": root attribute 'format' is '", format, "', expected '",
                  latent_format_name, "' (not a wick cached-latent dataset)");
  int64_t version = h5::read_int_attribute(root, "format_version", path);
  WICK_CHECK_KIND(Data, version == latent_format_version, path, ": root attribute 'format_version' is ", version,
                  ", this wick reads version ", latent_format_version);
  s.attributes.model_family = h5::read_string_attribute(root, "model_family", path);
  s.attributes.latent_channels = h5::read_int_attribute(root, "latent_channels", path);
  WICK_CHECK_KIND(Data, s.attributes.latent_channels > 0, path, ": root attribute 'latent_channels' is ",
                  s.attributes.latent_channels);
  s.attributes.vae_scaling_factor = h5::read_float_attribute(root, "vae_scaling_factor", path);
  s.attributes.vae_shift_factor = h5::read_float_attribute(root, "vae_shift_factor", path);
  // Per-channel normalization: read as found, checked by validate() (so that a bad file can be inspected).
  if (h5::has_attribute(root, "vae_latents_mean"))
    s.attributes.vae_latents_mean = h5::read_float_array_attribute(root, "vae_latents_mean", path);
  if (h5::has_attribute(root, "vae_latents_std"))
    s.attributes.vae_latents_std = h5::read_float_array_attribute(root, "vae_latents_std", path);
  if (h5::has_attribute(root, "text_encoder"))
    s.attributes.text_encoder = h5::read_string_attribute(root, "text_encoder", path);
  if (h5::has_attribute(root, "text_embeds_encoder"))
    s.attributes.text_embeds_encoder = h5::read_string_attribute(root, "text_embeds_encoder", path);
  if (h5::has_attribute(root, "text_pooled_encoder"))
    s.attributes.text_pooled_encoder = h5::read_string_attribute(root, "text_pooled_encoder", path);
  if (h5::has_attribute(root, "text_max_length")) {
    s.attributes.text_max_length = h5::read_int_attribute(root, "text_max_length", path);
    WICK_CHECK_KIND(Data, s.attributes.text_max_length > 0, path, ": root attribute 'text_max_length' is ",
                    s.attributes.text_max_length);
  }
  if (h5::has_attribute(root, "trigger_word"))
    s.attributes.trigger_word = h5::read_string_attribute(root, "trigger_word", path);
  if (h5::exists(root, "label_names")) {
    H5Id names = h5::open_dataset(root, "label_names", path);
    auto shape = h5::dataset_shape(names.get(), path, "label_names");
    WICK_CHECK_KIND(Data, shape.size() == 1, path, ": /label_names must be 1-d");
    s.attributes.label_names = h5::read_strings(names.get(), 0, shape[0], path, "label_names");
  }
}

std::vector<std::string> LatentDataset::State::read_bucket_names(hid_t root) const {
  const std::string& path = this->path;
  H5Id names = h5::open_dataset(root, "bucket_names", path);
  auto names_shape = h5::dataset_shape(names.get(), path, "bucket_names");
  WICK_CHECK_KIND(Data, names_shape.size() == 1, path, ": /bucket_names must be 1-d, has shape ",
                  Shape(names_shape));
  std::vector<std::string> bucket_names = h5::read_strings(names.get(), 0, names_shape[0], path, "bucket_names");
  WICK_CHECK_KIND(Data, h5::exists(root, "buckets"), path, ": missing group /buckets");
  return bucket_names;
}

void LatentDataset::State::open_buckets(hid_t root, const std::vector<std::string>& bucket_names) {
  State& s = *this;
  const std::string& path = s.path;
  const int64_t C = s.attributes.latent_channels;
  for (size_t b = 0; b < bucket_names.size(); ++b) {
    const std::string& name = bucket_names[b];
    State::Bucket bucket;
    bucket.info.name = name;
    WICK_CHECK_KIND(Data, parse_bucket_name(name, bucket.info.height, bucket.info.width), path, ": bucket name '",
                    name, "' in /bucket_names is not <H>x<W>");
    WICK_CHECK_KIND(Data, h5::exists(root, "buckets/" + name), path, ": missing group /buckets/", name);
    auto open_checked = [&](const std::string& member, size_t rank, H5T_class_t type_class) {
      std::string full = bucket_path(name, member);
      H5Id dataset = h5::open_dataset(root, full, path);
      auto shape = h5::dataset_shape(dataset.get(), path, full);
      WICK_CHECK_KIND(Data, shape.size() == rank, path, ": /", full, " has shape ", Shape(shape), ", expected ",
                      rank, " dimensions");
      H5Id type(H5Dget_type(dataset.get()));
      WICK_CHECK_KIND(Data, H5Tget_class(type.get()) == type_class, path, ": /", full, " has type ",
                      h5::type_name(dataset.get()), ", expected ",
                      type_class == H5T_FLOAT ? "floats" : type_class == H5T_INTEGER ? "integers" : "strings");
      return std::make_pair(std::move(dataset), shape);
    };
    auto [latents, latents_shape] = open_checked("latents", 4, H5T_FLOAT);
    int64_t N = latents_shape[0];
    WICK_CHECK_KIND(Data,
                    latents_shape[1] == C && latents_shape[2] == bucket.info.height &&
                        latents_shape[3] == bucket.info.width,
                    path, ": /", bucket_path(name, "latents"), " has shape ", Shape(latents_shape), ", expected [N, ",
                    C, ", ", bucket.info.height, ", ", bucket.info.width, "] (latent_channels ", C, ", bucket ", name,
                    ")");
    auto [embeds, embeds_shape] = open_checked("text/embeds", 3, H5T_FLOAT);
    auto [pooled, pooled_shape] = open_checked("text/pooled", 2, H5T_FLOAT);
    auto [mask, mask_shape] = open_checked("text/mask", 2, H5T_INTEGER);
    auto [captions, captions_shape] = open_checked("captions", 1, H5T_STRING);
    int64_t L = embeds_shape[1], D = embeds_shape[2], P = pooled_shape[1];
    auto check_rows = [&](const std::vector<int64_t>& shape, const std::string& member) {
      WICK_CHECK_KIND(Data, shape[0] == N, path, ": /", bucket_path(name, member), " has ", shape[0],
                      " rows, /", bucket_path(name, "latents"), " has ", N);
    };
    check_rows(embeds_shape, "text/embeds");
    check_rows(pooled_shape, "text/pooled");
    check_rows(mask_shape, "text/mask");
    check_rows(captions_shape, "captions");
    WICK_CHECK_KIND(Data, mask_shape[1] == L, path, ": /", bucket_path(name, "text/mask"), " has shape ",
                    Shape(mask_shape), ", expected [", N, ", ", L, "] (L of text/embeds)");
    if (b == 0) {
      s.text_length = L;
      s.text_dim = D;
      s.pooled_dim = P;
    }
    WICK_CHECK_KIND(Data, L == s.text_length && D == s.text_dim && P == s.pooled_dim, path, ": bucket ", name,
                    " has text shapes L=", L, " D=", D, " P=", P, ", bucket ", bucket_names[0], " has L=",
                    s.text_length, " D=", s.text_dim, " P=", s.pooled_dim);
    // Optional members: in every bucket or in none, N rows, the row shape of the schema.
    auto open_optional = [&](const std::string& member, bool& present, H5T_class_t type_class,
                             const std::vector<int64_t>& row) {
      const bool here = h5::exists(root, bucket_path(name, member));
      if (b == 0) present = here;
      WICK_CHECK_KIND(Data, here == present, path, ": /", bucket_path(name, member),
                      here ? " exists but the first bucket has none" : " is missing (other buckets have it)");
      if (!here) return H5Id();
      auto [dataset, shape] = open_checked(member, row.size() + 1, type_class);
      check_rows(shape, member);
      std::vector<int64_t> expected = {N};
      expected.insert(expected.end(), row.begin(), row.end());
      WICK_CHECK_KIND(Data, shape == expected, path, ": /", bucket_path(name, member), " has shape ", Shape(shape),
                      ", expected ", Shape(expected));
      return std::move(dataset);
    };
    bucket.labels = open_optional("labels", s.has_labels, H5T_INTEGER, {});
    bucket.logvar = open_optional("latents_logvar", s.has_logvar, H5T_FLOAT, {C, bucket.info.height, bucket.info.width});
    bucket.original_size = open_optional("original_size", s.has_original_size, H5T_INTEGER, {2});
    bucket.crop = open_optional("crop", s.has_crop, H5T_INTEGER, {2});
    bucket.flipped = open_optional("flipped", s.has_flipped, H5T_INTEGER, {});
    bucket.sources = open_optional("source", s.has_sources, H5T_STRING, {});
    if (s.has_logvar) bucket.logvar_f16 = is_f16(bucket.logvar.get());
    bucket.info.n_samples = N;
    bucket.latents_f16 = is_f16(latents.get());
    bucket.embeds_f16 = is_f16(embeds.get());
    bucket.pooled_f16 = is_f16(pooled.get());
    bucket.latents = std::move(latents);
    bucket.embeds = std::move(embeds);
    bucket.pooled = std::move(pooled);
    bucket.mask = std::move(mask);
    bucket.captions = std::move(captions);
    s.infos.push_back(bucket.info);
    s.buckets.push_back(std::move(bucket));
  }
}

void LatentDataset::State::read_sample_index(hid_t root, const std::vector<std::string>& bucket_names) {
  State& s = *this;
  const std::string& path = s.path;
  H5Id index = h5::open_dataset(root, "sample_index", path);
  auto index_shape = h5::dataset_shape(index.get(), path, "sample_index");
  WICK_CHECK_KIND(Data, index_shape.size() == 2 && index_shape[1] == 2, path, ": /sample_index has shape ",
                  Shape(index_shape), ", expected [S, 2]");
  int64_t S = index_shape[0];
  std::vector<int64_t> pairs(static_cast<size_t>(2 * S));
  h5::read_rows(index.get(), H5T_NATIVE_INT64, pairs.data(), 0, S, {2}, path, "sample_index");
  s.bucket_of.resize(static_cast<size_t>(S));
  s.row_of.resize(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) {
    int64_t b = pairs[static_cast<size_t>(2 * i)], row = pairs[static_cast<size_t>(2 * i + 1)];
    WICK_CHECK_KIND(Data, b >= 0 && b < static_cast<int64_t>(s.buckets.size()), path, ": /sample_index[", i,
                    "] names bucket ", b, ", the file has ", s.buckets.size());
    WICK_CHECK_KIND(Data, row >= 0 && row < s.buckets[static_cast<size_t>(b)].info.n_samples, path,
                    ": /sample_index[", i, "] names row ", row, " of bucket ", bucket_names[static_cast<size_t>(b)],
                    ", which has ", s.buckets[static_cast<size_t>(b)].info.n_samples, " rows");
    s.bucket_of[static_cast<size_t>(i)] = b;
    s.row_of[static_cast<size_t>(i)] = row;
  }
}

void LatentDataset::State::read_sample_prompts(hid_t root) {
  State& s = *this;
  const std::string& path = s.path;
  if (h5::exists(root, "sample_prompts")) {
    auto open_prompts = [&](const std::string& member, size_t rank, H5T_class_t type_class) {
      const std::string full = "sample_prompts/" + member;
      H5Id dataset = h5::open_dataset(root, full, path);
      auto shape = h5::dataset_shape(dataset.get(), path, full);
      H5Id type(H5Dget_type(dataset.get()));
      WICK_CHECK_KIND(Data, shape.size() == rank && H5Tget_class(type.get()) == type_class, path, ": /", full,
                      " is ", h5::type_name(dataset.get()), " ", Shape(shape), ", expected ", rank, " dimensions of ",
                      type_class == H5T_FLOAT ? "floats" : type_class == H5T_INTEGER ? "integers" : "strings");
      return shape;
    };
    auto captions = open_prompts("captions", 1, H5T_STRING);
    auto embeds = open_prompts("embeds", 3, H5T_FLOAT);
    auto pooled = open_prompts("pooled", 2, H5T_FLOAT);
    auto mask = open_prompts("mask", 2, H5T_INTEGER);
    const int64_t K = captions[0];
    WICK_CHECK_KIND(Data, embeds[0] == K && pooled[0] == K && mask[0] == K && mask[1] == embeds[1], path,
                    ": /sample_prompts: captions ", Shape(captions), ", embeds ", Shape(embeds), ", pooled ",
                    Shape(pooled), " and mask ", Shape(mask), " do not describe the same K prompts of L tokens");
    if (!s.buckets.empty())
      WICK_CHECK_KIND(Data, embeds[1] == s.text_length && embeds[2] == s.text_dim && pooled[1] == s.pooled_dim, path,
                      ": /sample_prompts has L=", embeds[1], " D=", embeds[2], " P=", pooled[1], ", the samples L=",
                      s.text_length, " D=", s.text_dim, " P=", s.pooled_dim);
    s.n_prompts = K;
  }
}

void LatentDataset::State::read_labels() {
  State& s = *this;
  const std::string& path = s.path;
  const int64_t S = static_cast<int64_t>(s.bucket_of.size());
  s.labels.assign(static_cast<size_t>(S), -1);
  if (s.has_labels) {
    std::vector<std::vector<int64_t>> per_bucket;
    for (auto& bucket : s.buckets) {
      std::vector<int64_t> values(static_cast<size_t>(bucket.info.n_samples));
      h5::read_rows(bucket.labels.get(), H5T_NATIVE_INT64, values.data(), 0, bucket.info.n_samples, {}, path,
                    bucket_path(bucket.info.name, "labels"));
      per_bucket.push_back(std::move(values));
    }
    for (int64_t i = 0; i < S; ++i)
      s.labels[static_cast<size_t>(i)] =
          per_bucket[static_cast<size_t>(s.bucket_of[static_cast<size_t>(i)])][static_cast<size_t>(s.row_of[static_cast<size_t>(i)])];
  }
}

std::shared_ptr<LatentDataset> LatentDataset::open_in_process(const std::string& path) {
  H5Lock lock;
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  h5::last_error();
  WICK_CHECK_KIND(Data, is_hdf5 > 0, path, ": not an HDF5 file");
  std::shared_ptr<LatentDataset> dataset(new LatentDataset());
  State& s = *dataset->state_;
  s.path = path;
  H5Id access(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), path, "/", "H5Pcreate"));
#if H5_VERSION_GE(1, 10, 7)
  // Several ranks open the same file read-only; flock fails on some network file systems.
  H5_CHECK(H5Pset_file_locking(access.get(), false, true), path, "/", "H5Pset_file_locking");
#endif
  s.file = H5Id(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get()), path, "/", "opening (H5Fopen)"));
  hid_t root = s.file.get();
  s.read_root_attributes(root);
  const std::vector<std::string> bucket_names = s.read_bucket_names(root);
  s.open_buckets(root, bucket_names);
  s.read_sample_index(root, bucket_names);
  s.read_sample_prompts(root);
  s.read_labels();
  return dataset;
}

const std::string& LatentDataset::path() const { return state_->path; }
const LatentDatasetAttributes& LatentDataset::attributes() const { return state_->attributes; }
const std::vector<BucketInfo>& LatentDataset::buckets() const { return state_->infos; }
int64_t LatentDataset::size() const { return static_cast<int64_t>(state_->bucket_of.size()); }
int64_t LatentDataset::text_length() const { return state_->text_length; }
int64_t LatentDataset::text_dim() const { return state_->text_dim; }
int64_t LatentDataset::pooled_dim() const { return state_->pooled_dim; }
bool LatentDataset::has_labels() const { return state_->has_labels; }
bool LatentDataset::has_logvar() const { return state_->has_logvar; }
bool LatentDataset::has_original_size() const { return state_->has_original_size; }
bool LatentDataset::has_crop() const { return state_->has_crop; }
bool LatentDataset::has_flipped() const { return state_->has_flipped; }
bool LatentDataset::has_sources() const { return state_->has_sources; }

std::optional<SamplePrompts> LatentDataset::sample_prompts() const {
  const State& s = *state_;
  if (s.n_prompts < 0) return std::nullopt;
  H5Lock lock;
  hid_t root = s.file.get();
  H5Id captions = h5::open_dataset(root, "sample_prompts/captions", s.path);
  H5Id embeds = h5::open_dataset(root, "sample_prompts/embeds", s.path);
  H5Id pooled = h5::open_dataset(root, "sample_prompts/pooled", s.path);
  H5Id mask = h5::open_dataset(root, "sample_prompts/mask", s.path);
  const int64_t K = s.n_prompts;
  const auto embeds_shape = h5::dataset_shape(embeds.get(), s.path, "sample_prompts/embeds");
  const int64_t L = embeds_shape[1], D = embeds_shape[2];
  const int64_t P = h5::dataset_shape(pooled.get(), s.path, "sample_prompts/pooled")[1];
  SamplePrompts out;
  out.captions = h5::read_strings(captions.get(), 0, K, s.path, "sample_prompts/captions");
  out.embeds = Tensor::empty({K, L, D}, DType::F32);
  out.pooled = Tensor::empty({K, P}, DType::F32);
  out.mask = Tensor::empty({K, L}, DType::U8);
  read_float_rows(embeds.get(), is_f16(embeds.get()), out.embeds.data_as<float>(), 0, K, {L, D}, s.path,
                  "sample_prompts/embeds");
  read_float_rows(pooled.get(), is_f16(pooled.get()), out.pooled.data_as<float>(), 0, K, {P}, s.path,
                  "sample_prompts/pooled");
  h5::read_rows(mask.get(), H5T_NATIVE_UINT8, out.mask.data(), 0, K, {L}, s.path, "sample_prompts/mask");
  return out;
}

int64_t LatentDataset::bucket_of(int64_t id) const {
  WICK_CHECK(id >= 0 && id < size(), "LatentDataset: sample id ", id, " out of range [0, ", size(), ") in ",
             state_->path);
  return state_->bucket_of[static_cast<size_t>(id)];
}
int64_t LatentDataset::row_of(int64_t id) const {
  bucket_of(id);
  return state_->row_of[static_cast<size_t>(id)];
}
int64_t LatentDataset::label_of(int64_t id) const {
  bucket_of(id);
  return state_->labels[static_cast<size_t>(id)];
}

void LatentDataset::read_into(const std::vector<int64_t>& ids, const SampleBuffers& out) const {
  WICK_CHECK(!ids.empty(), "LatentDataset::read: no sample ids");
  WICK_CHECK(out.latents && out.text_embeds && out.text_pooled && out.text_mask,
             "LatentDataset::read_into: the latents, text_embeds, text_pooled and text_mask buffers are required");
  const State& s = *state_;
  int64_t b = bucket_of(ids[0]);
  for (int64_t id : ids)
    WICK_CHECK(bucket_of(id) == b, "LatentDataset::read: samples ", ids[0], " and ", id,
               " are in different buckets (", s.infos[static_cast<size_t>(b)].name, ", ",
               s.infos[static_cast<size_t>(bucket_of(id))].name, ")");
  const State::Bucket& bucket = s.buckets[static_cast<size_t>(b)];
  const std::string& name = bucket.info.name;
  int64_t C = s.attributes.latent_channels, H = bucket.info.height, W = bucket.info.width;
  int64_t L = s.text_length, D = s.text_dim, P = s.pooled_dim;
  if (out.captions) out.captions->clear();
  if (out.sources) out.sources->clear();
  H5Lock lock;
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t row = s.row_of[static_cast<size_t>(ids[i])];
    int64_t k = static_cast<int64_t>(i);
    read_float_rows(bucket.latents.get(), bucket.latents_f16, out.latents + k * C * H * W, row, 1, {C, H, W}, s.path,
                    bucket_path(name, "latents"));
    if (out.latents_logvar && s.has_logvar)
      read_float_rows(bucket.logvar.get(), bucket.logvar_f16, out.latents_logvar + k * C * H * W, row, 1, {C, H, W},
                      s.path, bucket_path(name, "latents_logvar"));
    read_float_rows(bucket.embeds.get(), bucket.embeds_f16, out.text_embeds + k * L * D, row, 1, {L, D}, s.path,
                    bucket_path(name, "text/embeds"));
    read_float_rows(bucket.pooled.get(), bucket.pooled_f16, out.text_pooled + k * P, row, 1, {P}, s.path,
                    bucket_path(name, "text/pooled"));
    h5::read_rows(bucket.mask.get(), H5T_NATIVE_UINT8, out.text_mask + k * L, row, 1, {L}, s.path,
                  bucket_path(name, "text/mask"));
    if (out.captions) {
      auto text = h5::read_strings(bucket.captions.get(), row, 1, s.path, bucket_path(name, "captions"));
      out.captions->push_back(std::move(text[0]));
    }
    if (out.labels) out.labels[i] = s.labels[static_cast<size_t>(ids[i])];
    if (out.original_size && s.has_original_size)
      h5::read_rows(bucket.original_size.get(), H5T_NATIVE_INT64, out.original_size + 2 * k, row, 1, {2}, s.path,
                    bucket_path(name, "original_size"));
    if (out.crop && s.has_crop)
      h5::read_rows(bucket.crop.get(), H5T_NATIVE_INT64, out.crop + 2 * k, row, 1, {2}, s.path,
                    bucket_path(name, "crop"));
    if (out.flipped && s.has_flipped)
      h5::read_rows(bucket.flipped.get(), H5T_NATIVE_UINT8, out.flipped + k, row, 1, {}, s.path,
                    bucket_path(name, "flipped"));
    if (out.sources && s.has_sources) {
      auto text = h5::read_strings(bucket.sources.get(), row, 1, s.path, bucket_path(name, "source"));
      out.sources->push_back(std::move(text[0]));
    }
  }
}

LatentSamples LatentDataset::read(const std::vector<int64_t>& ids) const {
  WICK_CHECK(!ids.empty(), "LatentDataset::read: no sample ids");
  const State& s = *state_;
  const BucketInfo& info = s.infos[static_cast<size_t>(bucket_of(ids[0]))];
  int64_t n = static_cast<int64_t>(ids.size());
  const Shape latents_shape = {n, s.attributes.latent_channels, info.height, info.width};
  LatentSamples out;
  out.latents = Tensor::empty(latents_shape, DType::F32);
  out.text_embeds = Tensor::empty({n, s.text_length, s.text_dim}, DType::F32);
  out.text_pooled = Tensor::empty({n, s.pooled_dim}, DType::F32);
  out.text_mask = Tensor::empty({n, s.text_length}, DType::U8);
  Tensor labels = Tensor::empty({n}, DType::I64);
  if (s.has_logvar) out.latents_logvar = Tensor::empty(latents_shape, DType::F32);
  if (s.has_original_size) out.original_size = Tensor::empty({n, 2}, DType::I64);
  if (s.has_crop) out.crop = Tensor::empty({n, 2}, DType::I64);
  if (s.has_flipped) out.flipped = Tensor::empty({n}, DType::U8);
  auto pointer = [](Tensor& t) { return t.defined() ? t.data() : nullptr; };
  read_into(ids, {.latents = out.latents.data_as<float>(),
                  .text_embeds = out.text_embeds.data_as<float>(),
                  .text_pooled = out.text_pooled.data_as<float>(),
                  .text_mask = static_cast<uint8_t*>(out.text_mask.data()),
                  .latents_logvar = static_cast<float*>(pointer(out.latents_logvar)),
                  .labels = labels.data_as<int64_t>(),
                  .original_size = static_cast<int64_t*>(pointer(out.original_size)),
                  .crop = static_cast<int64_t*>(pointer(out.crop)),
                  .flipped = static_cast<uint8_t*>(pointer(out.flipped)),
                  .captions = &out.captions,
                  .sources = s.has_sources ? &out.sources : nullptr});
  if (s.has_labels) out.labels = labels;
  out.ids = ids;
  return out;
}

ValidationReport LatentDataset::validate() const {
  const State& s = *state_;
  ValidationReport report;
  report.n_samples = size();
  H5Lock lock;
  double sum = 0, sum_squares = 0;
  int64_t count = 0;
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    const State::Bucket& bucket = s.buckets[b];
    const std::string& name = bucket.info.name;
    auto check_type = [&](hid_t dataset, const std::string& member, const std::string& expected) {
      std::string actual = h5::type_name(dataset);
      report.dtypes.push_back(bucket_path(name, member) + ": " + actual);
      if (actual != expected)
        report.errors.push_back(detail::concat("/", bucket_path(name, member), " is ", actual, ", the schema says ", expected));
    };
    check_type(bucket.latents.get(), "latents", "f16");
    check_type(bucket.embeds.get(), "text/embeds", "f16");
    check_type(bucket.pooled.get(), "text/pooled", "f16");
    check_type(bucket.mask.get(), "text/mask", "u8");
    check_type(bucket.captions.get(), "captions", "string");
    if (bucket.labels.valid()) check_type(bucket.labels.get(), "labels", "i64");
    if (bucket.logvar.valid()) check_type(bucket.logvar.get(), "latents_logvar", "f16");
    if (bucket.original_size.valid()) check_type(bucket.original_size.get(), "original_size", "i64");
    if (bucket.crop.valid()) check_type(bucket.crop.get(), "crop", "i64");
    if (bucket.flipped.valid()) check_type(bucket.flipped.get(), "flipped", "u8");
    if (bucket.sources.valid()) check_type(bucket.sources.get(), "source", "string");

    int64_t C = s.attributes.latent_channels, H = bucket.info.height, W = bucket.info.width;
    int64_t N = bucket.info.n_samples, block = 256;
    struct Member {
      hid_t dataset;
      bool f16;
      std::string name;
      std::vector<int64_t> row;
      bool stats;
    };
    std::vector<Member> members = {
        {bucket.latents.get(), bucket.latents_f16, "latents", {C, H, W}, true},
        {bucket.embeds.get(), bucket.embeds_f16, "text/embeds", {s.text_length, s.text_dim}, false},
        {bucket.pooled.get(), bucket.pooled_f16, "text/pooled", {s.pooled_dim}, false}};
    if (bucket.logvar.valid())
      members.push_back({bucket.logvar.get(), bucket.logvar_f16, "latents_logvar", {C, H, W}, false});
    for (const Member& member : members) {
      int64_t row_size = 1;
      for (int64_t extent : member.row) row_size *= extent;
      std::vector<float> values(static_cast<size_t>(block * row_size));
      bool reported = false;
      try {
        for (int64_t start = 0; start < N && !reported; start += block) {
          int64_t n = std::min(block, N - start);
          read_float_rows(member.dataset, member.f16, values.data(), start, n, member.row, s.path,
                          bucket_path(name, member.name));
          for (int64_t i = 0; i < n * row_size; ++i) {
            float v = values[static_cast<size_t>(i)];
            if (!std::isfinite(v)) {
              report.errors.push_back(detail::concat("/", bucket_path(name, member.name), " row ", start + i / row_size,
                                                     " holds a non-finite value (", std::isnan(v) ? "NaN" : "Inf",
                                                     ")"));
              reported = true;
              break;
            }
            if (member.stats) {
              sum += v;
              sum_squares += static_cast<double>(v) * v;
              ++count;
            }
          }
        }
      } catch (const WickError& error) {
        report.errors.push_back(error.what());
      }
    }
  }
  if (s.n_prompts >= 0) {
    try {
      const SamplePrompts prompts = *sample_prompts();
      for (const char* member : {"embeds", "pooled"}) {
        const std::string full = std::string("sample_prompts/") + member;
        H5Id dataset = h5::open_dataset(s.file.get(), full, s.path);
        const std::string actual = h5::type_name(dataset.get());
        report.dtypes.push_back(full + ": " + actual);
        if (actual != "f16") report.errors.push_back("/" + full + " is " + actual + ", the schema says f16");
      }
      for (const Tensor* values : {&prompts.embeds, &prompts.pooled})
        for (float v : values->to_vector<float>())
          if (!std::isfinite(v)) {
            report.errors.push_back(std::string("/sample_prompts/") + (values == &prompts.embeds ? "embeds" : "pooled") +
                                    " holds a non-finite value");
            break;
          }
    } catch (const WickError& error) {
      report.errors.push_back(error.what());
    }
  }
  if (count > 0) {
    report.latent_mean = sum / static_cast<double>(count);
    report.latent_std = std::sqrt(std::max(0.0, sum_squares / static_cast<double>(count) -
                                                    report.latent_mean * report.latent_mean));
  }
  for (const std::string& problem : latent_normalization_problems(s.attributes)) report.errors.push_back(problem);
  // The sample index must name every (bucket, row) exactly once.
  std::vector<std::vector<int64_t>> seen(s.buckets.size());
  for (size_t b = 0; b < s.buckets.size(); ++b) seen[b].assign(static_cast<size_t>(s.buckets[b].info.n_samples), 0);
  for (int64_t i = 0; i < size(); ++i)
    ++seen[static_cast<size_t>(s.bucket_of[static_cast<size_t>(i)])][static_cast<size_t>(s.row_of[static_cast<size_t>(i)])];
  for (size_t b = 0; b < s.buckets.size(); ++b)
    for (size_t row = 0; row < seen[b].size(); ++row)
      if (seen[b][row] != 1) {
        report.errors.push_back("/sample_index names bucket " + s.buckets[b].info.name + " row " +
                                std::to_string(row) + " " + std::to_string(seen[b][row]) + " times (expected once)");
        break;
      }
  if (s.has_labels && !s.attributes.label_names.empty()) {
    int64_t k = static_cast<int64_t>(s.attributes.label_names.size());
    for (int64_t i = 0; i < size(); ++i)
      if (s.labels[static_cast<size_t>(i)] < 0 || s.labels[static_cast<size_t>(i)] >= k) {
        report.errors.push_back("sample " + std::to_string(i) + " has label " +
                                std::to_string(s.labels[static_cast<size_t>(i)]) + ", /label_names has " +
                                std::to_string(k) + " names");
        break;
      }
  }
  return report;
}

#else  // built without HDF5

struct LatentDataset::State {};
namespace {
[[noreturn]] void no_hdf5(const std::string& path) {
  WICK_FAIL(Data, path, ": this wick was built without HDF5 (install libhdf5-dev and re-run cmake)");
}
}  // namespace
LatentDataset::LatentDataset() = default;
LatentDataset::~LatentDataset() = default;
std::shared_ptr<LatentDataset> LatentDataset::open(const std::string& path) { no_hdf5(path); }
const std::string& LatentDataset::path() const { no_hdf5(""); }
const LatentDatasetAttributes& LatentDataset::attributes() const { no_hdf5(""); }
const std::vector<BucketInfo>& LatentDataset::buckets() const { no_hdf5(""); }
int64_t LatentDataset::size() const { return 0; }
int64_t LatentDataset::text_length() const { return 0; }
int64_t LatentDataset::text_dim() const { return 0; }
int64_t LatentDataset::pooled_dim() const { return 0; }
bool LatentDataset::has_labels() const { return false; }
int64_t LatentDataset::bucket_of(int64_t) const { no_hdf5(""); }
int64_t LatentDataset::row_of(int64_t) const { no_hdf5(""); }
int64_t LatentDataset::label_of(int64_t) const { no_hdf5(""); }
bool LatentDataset::has_logvar() const { return false; }
bool LatentDataset::has_original_size() const { return false; }
bool LatentDataset::has_crop() const { return false; }
bool LatentDataset::has_flipped() const { return false; }
bool LatentDataset::has_sources() const { return false; }
std::optional<SamplePrompts> LatentDataset::sample_prompts() const { return std::nullopt; }
void LatentDataset::read_into(const std::vector<int64_t>&, const SampleBuffers&) const { no_hdf5(""); }
LatentSamples LatentDataset::read(const std::vector<int64_t>&) const { no_hdf5(""); }
ValidationReport LatentDataset::validate() const { no_hdf5(""); }
#endif

std::vector<std::string> latent_normalization_problems(const LatentDatasetAttributes& a) {
  std::vector<std::string> problems;
  const std::vector<double>&mean = a.vae_latents_mean, &std = a.vae_latents_std;
  if (mean.empty() && std.empty()) return problems;
  if (mean.empty() != std.empty()) {
    problems.push_back(std::string("root attribute '") + (mean.empty() ? "vae_latents_std" : "vae_latents_mean") +
                       "' is given without '" + (mean.empty() ? "vae_latents_mean" : "vae_latents_std") +
                       "' (the per-channel normalization needs both, or neither)");
    return problems;
  }
  for (const auto* values : {&mean, &std})
    if (static_cast<int64_t>(values->size()) != a.latent_channels)
      problems.push_back(std::string("root attribute '") + (values == &mean ? "vae_latents_mean" : "vae_latents_std") +
                         "' has " + std::to_string(values->size()) + " values, latent_channels is " +
                         std::to_string(a.latent_channels));
  for (size_t c = 0; c < mean.size(); ++c)
    if (!std::isfinite(mean[c])) {
      problems.push_back("root attribute 'vae_latents_mean' is not finite at channel " + std::to_string(c));
      break;
    }
  for (size_t c = 0; c < std.size(); ++c)
    if (!(std::isfinite(std[c]) && std[c] > 0)) {
      problems.push_back("root attribute 'vae_latents_std' is " + std::to_string(std[c]) + " at channel " +
                         std::to_string(c) + " (it must be finite and > 0)");
      break;
    }
  return problems;
}

// ---------------------------------------------------------------- class filter

std::vector<int64_t> resolve_labels(const LatentDataset& dataset, const std::vector<std::string>& names) {
  const auto& known = dataset.attributes().label_names;
  auto lower = [](std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  };
  std::vector<int64_t> labels;
  for (const std::string& name : names) {
    auto match = std::find_if(known.begin(), known.end(), [&](const std::string& k) { return lower(k) == lower(name); });
    if (match != known.end()) {
      labels.push_back(match - known.begin());
      continue;
    }
    bool numeric = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (numeric) {
      labels.push_back(std::stoll(name));
      continue;
    }
    std::string valid;
    for (const auto& k : known) valid += (valid.empty() ? "" : ", ") + k;
    WICK_FAIL(Config, "class filter: unknown class '", name, "' in ", dataset.path(), " (classes: ",
              valid.empty() ? "none recorded; use label numbers" : valid, ")");
  }
  return labels;
}

std::vector<int64_t> select_ids(const LatentDataset& dataset, const ClassFilter& filter) {
  std::vector<int64_t> ids;
  if (!filter.empty())
    WICK_CHECK_KIND(Data, dataset.has_labels(), dataset.path(), ": a class filter needs labels, the file has none");
  for (int64_t id = 0; id < dataset.size(); ++id) {
    if (!filter.empty()) {
      int64_t label = dataset.label_of(id);
      auto has = [label](const std::vector<int64_t>& v) { return std::find(v.begin(), v.end(), label) != v.end(); };
      if (!filter.include.empty() && !has(filter.include)) continue;
      if (has(filter.exclude)) continue;
    }
    ids.push_back(id);
  }
  return ids;
}

}  // namespace wick
