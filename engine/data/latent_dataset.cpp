#include "engine/data/latent_dataset.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

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

// ---------------------------------------------------------------- writer

struct LatentDatasetWriter::State {
  struct Bucket {
    std::string name;
    int64_t height = 0, width = 0, n = 0;
    H5Id latents, embeds, pooled, mask, captions, labels;
  };
  std::string path;
  LatentDatasetAttributes attributes;
  H5Id file;
  std::vector<Bucket> buckets;
  std::vector<int64_t> index;  // (bucket, row) pairs
  int64_t text_length = -1, text_dim = -1, pooled_dim = -1;
  int has_labels = -1;  // unknown until the first append
  bool closed = false;
};

LatentDatasetWriter::LatentDatasetWriter(const std::string& path, const LatentDatasetAttributes& attributes)
    : state_(std::make_unique<State>()) {
  WICK_CHECK(attributes.latent_channels > 0, "LatentDatasetWriter: latent_channels must be > 0");
  WICK_CHECK(!attributes.model_family.empty(), "LatentDatasetWriter: model_family must be set");
  H5Lock lock;
  state_->path = path;
  state_->attributes = attributes;
  state_->file = H5Id(H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), path, "/",
                               "creating the file (H5Fcreate)"));
  hid_t root = state_->file.get();
  h5::write_string_attribute(root, "format", latent_format_name, path);
  h5::write_int_attribute(root, "format_version", latent_format_version, path);
  h5::write_string_attribute(root, "model_family", attributes.model_family, path);
  h5::write_int_attribute(root, "latent_channels", attributes.latent_channels, path);
  h5::write_float_attribute(root, "vae_scaling_factor", attributes.vae_scaling_factor, path);
  h5::write_float_attribute(root, "vae_shift_factor", attributes.vae_shift_factor, path);
  if (!attributes.text_encoder.empty()) h5::write_string_attribute(root, "text_encoder", attributes.text_encoder, path);
  if (!attributes.text_embeds_encoder.empty())
    h5::write_string_attribute(root, "text_embeds_encoder", attributes.text_embeds_encoder, path);
  if (!attributes.text_pooled_encoder.empty())
    h5::write_string_attribute(root, "text_pooled_encoder", attributes.text_pooled_encoder, path);
  if (attributes.text_max_length > 0) h5::write_int_attribute(root, "text_max_length", attributes.text_max_length, path);
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
  bool labelled = samples.labels.defined();
  if (s.has_labels < 0) s.has_labels = labelled ? 1 : 0;
  WICK_CHECK(labelled == (s.has_labels == 1), op, "labels must be given in every append or in none");
  if (labelled) WICK_CHECK(samples.labels.shape() == Shape({n}), op, "labels must be [n]");
  for (const Tensor* t : {&samples.latents, &samples.text_embeds, &samples.text_pooled, &samples.text_mask})
    WICK_CHECK(t->device().is_cpu(), op, "tensors must be on the CPU, got ", t->describe());

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
    bucket.latents = h5::create_rows(root, bucket_path(name, "latents"), h5::f16_type(), {C, H, W}, 1, path);
    bucket.embeds = h5::create_rows(root, bucket_path(name, "text/embeds"), h5::f16_type(), {L, D}, 1, path);
    bucket.pooled = h5::create_rows(root, bucket_path(name, "text/pooled"), h5::f16_type(), {P}, 1024, path);
    bucket.mask = h5::create_rows(root, bucket_path(name, "text/mask"), H5T_STD_U8LE, {L}, 1024, path);
    bucket.captions = h5::create_rows(root, bucket_path(name, "captions"), h5::vlen_string_type(), {}, 1024, path);
    if (labelled) bucket.labels = h5::create_rows(root, bucket_path(name, "labels"), H5T_STD_I64LE, {}, 1024, path);
    s.buckets.push_back(std::move(bucket));
    found = s.buckets.end() - 1;
  }
  State::Bucket& bucket = *found;
  int64_t bucket_number = found - s.buckets.begin();
  Tensor latents = samples.latents.to(DType::F16).contiguous();
  Tensor embeds = samples.text_embeds.to(DType::F16).contiguous();
  Tensor pooled = samples.text_pooled.to(DType::F16).contiguous();
  Tensor mask = samples.text_mask.to(DType::U8).contiguous();
  h5::append_rows(bucket.latents.get(), h5::f16_type(), latents.data(), bucket.n, n, {C, H, W}, path,
                  bucket_path(name, "latents"));
  h5::append_rows(bucket.embeds.get(), h5::f16_type(), embeds.data(), bucket.n, n, {L, D}, path,
                  bucket_path(name, "text/embeds"));
  h5::append_rows(bucket.pooled.get(), h5::f16_type(), pooled.data(), bucket.n, n, {P}, path,
                  bucket_path(name, "text/pooled"));
  h5::append_rows(bucket.mask.get(), H5T_NATIVE_UINT8, mask.data(), bucket.n, n, {L}, path,
                  bucket_path(name, "text/mask"));
  std::vector<const char*> texts;
  for (const std::string& caption : samples.captions) texts.push_back(caption.c_str());
  h5::append_rows(bucket.captions.get(), h5::vlen_string_type(), texts.data(), bucket.n, n, {}, path,
                  bucket_path(name, "captions"));
  if (labelled) {
    Tensor labels = samples.labels.to(DType::I64).contiguous();
    h5::append_rows(bucket.labels.get(), H5T_NATIVE_INT64, labels.data(), bucket.n, n, {}, path,
                    bucket_path(name, "labels"));
  }
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) {
    ids.push_back(n_samples());
    s.index.push_back(bucket_number);
    s.index.push_back(bucket.n + i);
  }
  bucket.n += n;
  return ids;
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
  std::vector<const char*> texts;
  for (const auto& bucket : s.buckets) texts.push_back(bucket.name.c_str());
  h5::append_rows(names.get(), h5::vlen_string_type(), texts.data(), 0, static_cast<int64_t>(texts.size()), {},
                  s.path, "bucket_names");
  if (!s.attributes.label_names.empty()) {
    H5Id labels = h5::create_rows(root, "label_names", h5::vlen_string_type(), {}, 64, s.path);
    texts.clear();
    for (const auto& label : s.attributes.label_names) texts.push_back(label.c_str());
    h5::append_rows(labels.get(), h5::vlen_string_type(), texts.data(), 0, static_cast<int64_t>(texts.size()), {},
                    s.path, "label_names");
  }
  s.buckets.clear();
  H5_CHECK(H5Fflush(root, H5F_SCOPE_GLOBAL), s.path, "/", "H5Fflush");
  s.file.reset();
}

// ---------------------------------------------------------------- reader

struct LatentDataset::State {
  struct Bucket {
    BucketInfo info;
    H5Id latents, embeds, pooled, mask, captions, labels;
    bool latents_f16 = true, embeds_f16 = true, pooled_f16 = true;
  };
  std::string path;
  LatentDatasetAttributes attributes;
  H5Id file;
  std::vector<Bucket> buckets;
  std::vector<BucketInfo> infos;
  std::vector<int64_t> bucket_of, row_of, labels;
  int64_t text_length = 0, text_dim = 0, pooled_dim = 0;
  bool has_labels = false;
};

LatentDataset::LatentDataset() : state_(std::make_unique<State>()) {}
LatentDataset::~LatentDataset() {
  H5Lock lock;
  state_.reset();
}

std::shared_ptr<LatentDataset> LatentDataset::open(const std::string& path) {
  WICK_CHECK_KIND(Data, std::filesystem::exists(path), path, ": no such file");
  WICK_CHECK_KIND(Data, std::filesystem::is_regular_file(path), path, ": not a regular file");
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
  if (h5::exists(root, "label_names")) {
    H5Id names = h5::open_dataset(root, "label_names", path);
    auto shape = h5::dataset_shape(names.get(), path, "label_names");
    WICK_CHECK_KIND(Data, shape.size() == 1, path, ": /label_names must be 1-d");
    s.attributes.label_names = h5::read_strings(names.get(), 0, shape[0], path, "label_names");
  }

  H5Id names = h5::open_dataset(root, "bucket_names", path);
  auto names_shape = h5::dataset_shape(names.get(), path, "bucket_names");
  WICK_CHECK_KIND(Data, names_shape.size() == 1, path, ": /bucket_names must be 1-d, has shape ",
                  Shape(names_shape));
  std::vector<std::string> bucket_names = h5::read_strings(names.get(), 0, names_shape[0], path, "bucket_names");
  WICK_CHECK_KIND(Data, h5::exists(root, "buckets"), path, ": missing group /buckets");

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
    bool labelled = h5::exists(root, bucket_path(name, "labels"));
    if (b == 0) s.has_labels = labelled;
    WICK_CHECK_KIND(Data, labelled == s.has_labels, path, ": /", bucket_path(name, "labels"),
                    labelled ? " exists but the first bucket has no labels" : " is missing (other buckets have labels)");
    if (labelled) {
      auto [labels, labels_shape] = open_checked("labels", 1, H5T_INTEGER);
      check_rows(labels_shape, "labels");
      bucket.labels = std::move(labels);
    }
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

void LatentDataset::read_into(const std::vector<int64_t>& ids, float* latents, float* embeds, float* pooled,
                              uint8_t* mask, int64_t* labels, std::vector<std::string>* captions) const {
  WICK_CHECK(!ids.empty(), "LatentDataset::read: no sample ids");
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
  if (captions) captions->clear();
  H5Lock lock;
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t row = s.row_of[static_cast<size_t>(ids[i])];
    int64_t k = static_cast<int64_t>(i);
    read_float_rows(bucket.latents.get(), bucket.latents_f16, latents + k * C * H * W, row, 1, {C, H, W}, s.path,
                    bucket_path(name, "latents"));
    read_float_rows(bucket.embeds.get(), bucket.embeds_f16, embeds + k * L * D, row, 1, {L, D}, s.path,
                    bucket_path(name, "text/embeds"));
    read_float_rows(bucket.pooled.get(), bucket.pooled_f16, pooled + k * P, row, 1, {P}, s.path,
                    bucket_path(name, "text/pooled"));
    h5::read_rows(bucket.mask.get(), H5T_NATIVE_UINT8, mask + k * L, row, 1, {L}, s.path,
                  bucket_path(name, "text/mask"));
    if (captions) {
      auto text = h5::read_strings(bucket.captions.get(), row, 1, s.path, bucket_path(name, "captions"));
      captions->push_back(std::move(text[0]));
    }
    if (labels) labels[i] = s.labels[static_cast<size_t>(ids[i])];
  }
}

LatentSamples LatentDataset::read(const std::vector<int64_t>& ids) const {
  WICK_CHECK(!ids.empty(), "LatentDataset::read: no sample ids");
  const State& s = *state_;
  const BucketInfo& info = s.infos[static_cast<size_t>(bucket_of(ids[0]))];
  int64_t n = static_cast<int64_t>(ids.size());
  LatentSamples out;
  out.latents = Tensor::empty({n, s.attributes.latent_channels, info.height, info.width}, DType::F32);
  out.text_embeds = Tensor::empty({n, s.text_length, s.text_dim}, DType::F32);
  out.text_pooled = Tensor::empty({n, s.pooled_dim}, DType::F32);
  out.text_mask = Tensor::empty({n, s.text_length}, DType::U8);
  Tensor labels = Tensor::empty({n}, DType::I64);
  read_into(ids, out.latents.data_as<float>(), out.text_embeds.data_as<float>(), out.text_pooled.data_as<float>(),
            static_cast<uint8_t*>(out.text_mask.data()), labels.data_as<int64_t>(), &out.captions);
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
  if (count > 0) {
    report.latent_mean = sum / static_cast<double>(count);
    report.latent_std = std::sqrt(std::max(0.0, sum_squares / static_cast<double>(count) -
                                                    report.latent_mean * report.latent_mean));
  }
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

struct LatentDatasetWriter::State {};
struct LatentDataset::State {};
namespace {
[[noreturn]] void no_hdf5(const std::string& path) {
  WICK_FAIL(Data, path, ": this wick was built without HDF5 (install libhdf5-dev and re-run cmake)");
}
}  // namespace
LatentDatasetWriter::LatentDatasetWriter(const std::string& path, const LatentDatasetAttributes&) { no_hdf5(path); }
LatentDatasetWriter::~LatentDatasetWriter() = default;
std::vector<int64_t> LatentDatasetWriter::append(const LatentSamples&) { no_hdf5(""); }
int64_t LatentDatasetWriter::n_samples() const { return 0; }
void LatentDatasetWriter::close() {}
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
void LatentDataset::read_into(const std::vector<int64_t>&, float*, float*, float*, uint8_t*, int64_t*,
                              std::vector<std::string>*) const {
  no_hdf5("");
}
LatentSamples LatentDataset::read(const std::vector<int64_t>&) const { no_hdf5(""); }
ValidationReport LatentDataset::validate() const { no_hdf5(""); }
#endif

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
