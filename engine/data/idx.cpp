#include "engine/data/idx.h"

#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "runtime/ops/copy.h"

namespace wick {
namespace {

std::vector<uint8_t> read_all(const std::string& path) {
  bool gzipped = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  std::vector<uint8_t> bytes;
  if (!gzipped) {
    std::ifstream file(path, std::ios::binary);
    WICK_CHECK_KIND(Data, file.good(), path, ": cannot open");
    bytes.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    return bytes;
  }
  gzFile file = gzopen(path.c_str(), "rb");
  WICK_CHECK_KIND(Data, file != nullptr, path, ": cannot open");
  std::vector<uint8_t> chunk(1 << 20);
  while (true) {
    int n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      std::string message = gzerror(file, &code);
      gzclose(file);
      WICK_FAIL(Data, path, ": corrupt gzip data (", message, ")");
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + n);
  }
  gzclose(file);
  return bytes;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

}  // namespace

Tensor read_idx(const std::string& path) {
  std::vector<uint8_t> bytes = read_all(path);
  WICK_CHECK_KIND(Data, bytes.size() >= 4, path, ": ", bytes.size(), " bytes, too short for an IDX header");
  WICK_CHECK_KIND(Data, bytes[0] == 0 && bytes[1] == 0, path, ": not an IDX file (magic starts ",
                  int(bytes[0]), " ", int(bytes[1]), ", expected 0 0)");
  int type_code = bytes[2], n_dims = bytes[3];
  DType dtype;
  int element_size;
  switch (type_code) {
    case 0x08: dtype = DType::U8; element_size = 1; break;
    case 0x09: dtype = DType::I8; element_size = 1; break;
    case 0x0C: dtype = DType::I32; element_size = 4; break;
    case 0x0D: dtype = DType::F32; element_size = 4; break;
    case 0x0E: dtype = DType::F64; element_size = 8; break;
    default: WICK_FAIL(Data, path, ": unsupported IDX element type 0x", std::hex, type_code);
  }
  size_t header = 4 + 4 * static_cast<size_t>(n_dims);
  WICK_CHECK_KIND(Data, n_dims >= 1 && bytes.size() >= header, path, ": truncated IDX header (", n_dims,
                  " dimensions)");
  Shape shape;
  uint64_t count = 1;
  for (int d = 0; d < n_dims; ++d) {
    uint32_t extent = big_endian_u32(bytes.data() + 4 + 4 * d);
    shape.push_back(extent);
    count *= extent;
    WICK_CHECK_KIND(Data, count <= (uint64_t(1) << 40), path, ": implausible IDX dimensions");
  }
  uint64_t expected = header + count * static_cast<uint64_t>(element_size);
  WICK_CHECK_KIND(Data, bytes.size() == expected, path, ": ", bytes.size(), " bytes, expected ", expected,
                  " for shape ", shape, " (truncated or trailing data)");
  Tensor out = Tensor::empty(shape, dtype);
  std::memcpy(out.data(), bytes.data() + header, count * element_size);
  if (element_size > 1) {
    // IDX stores big-endian values: swap each element's bytes in place.
    auto* data = static_cast<uint8_t*>(out.data());
    for (uint64_t i = 0; i < count; ++i)
      for (int lo = 0, hi = element_size - 1; lo < hi; ++lo, --hi)
        std::swap(data[i * element_size + lo], data[i * element_size + hi]);
  }
  return out;
}

std::string fashion_mnist_dir() {
  if (const char* dir = std::getenv("WICK_FASHION_MNIST_DIR")) return dir;
  return "/usr/share/datasets/fashion-mnist";
}

FashionMnist load_fashion_mnist(const std::string& split) {
  WICK_CHECK_KIND(Config, split == "train" || split == "test", "fashion-mnist: unknown split '", split,
                  "' (valid: train, test)");
  std::string prefix = fashion_mnist_dir() + "/" + (split == "train" ? "train" : "t10k");
  std::string images_path = prefix + "-images-idx3-ubyte.gz", labels_path = prefix + "-labels-idx1-ubyte.gz";
  for (const std::string& path : {images_path, labels_path}) {
    std::ifstream probe(path);
    WICK_CHECK_KIND(Data, probe.good(), path, " not found: install Debian's dataset-fashion-mnist package "
                    "(apt-get install dataset-fashion-mnist) or set WICK_FASHION_MNIST_DIR");
  }
  Tensor images = read_idx(images_path), labels = read_idx(labels_path);
  WICK_CHECK_KIND(Data, images.dim() == 3 && labels.dim() == 1 && images.size(0) == labels.size(0), prefix,
                  ": images ", images.describe(), " and labels ", labels.describe(), " do not match");
  int64_t n = images.size(0);
  FashionMnist set;
  Tensor pixels = cast(images.view({n, images.size(1) * images.size(2)}), DType::F32);
  float* p = pixels.data_as<float>();
  for (int64_t i = 0; i < pixels.numel(); ++i) p[i] *= 1.0f / 255.0f;
  set.images = pixels;
  set.labels = cast(labels, DType::I64);
  return set;
}

const std::array<const char*, 10>& fashion_mnist_class_names() {
  static const std::array<const char*, 10> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

}  // namespace wick
