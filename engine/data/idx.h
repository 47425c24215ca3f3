// IDX files (the MNIST / Fashion-MNIST format), plain or gzipped, and the Fashion-MNIST set that
// Debian's dataset-fashion-mnist package installs.
//
//   Tensor images = read_idx("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");  // u8 [60000, 28, 28]
//   FashionMnist train = load_fashion_mnist("train");   // images f32 [N, 784] in [0, 1], labels i64 [N]
//
// IDX: big-endian u32 magic 0x000008TT (TT = element type, the low byte = number of dimensions),
// then one big-endian u32 per dimension, then the data. Truncated or malformed files raise
// WickError (Data) naming the file and the problem.
#pragma once

#include <array>
#include <string>

#include "runtime/tensor.h"

namespace wick {

// Reads an IDX file (gzipped when the name ends in .gz) into a CPU tensor: u8 data -> U8, i8 -> I8,
// i32 -> I32, f32 -> F32, f64 -> F64; the shape is the file's dimensions.
Tensor read_idx(const std::string& path);

struct FashionMnist {
  Tensor images;  // f32 [N, 784], pixel / 255
  Tensor labels;  // i64 [N], 0..9
};

// The folder Debian installs the set into; WICK_FASHION_MNIST_DIR overrides it.
std::string fashion_mnist_dir();
// split: "train" (60,000) or "test" (10,000). The error names the missing file and the package.
FashionMnist load_fashion_mnist(const std::string& split);
const std::array<const char*, 10>& fashion_mnist_class_names();

}  // namespace wick
