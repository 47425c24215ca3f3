// Small helpers over the HDF5 C API for the cached-latent dataset (private to engine/data; only
// included by .cpp files compiled with WICK_HAS_HDF5, since libwick links HDF5 privately).
//
//   H5Lock lock;                                        // every HDF5 call runs under this lock
//   H5Id file(H5_CHECK(H5Fopen(...), path, "/", "H5Fopen"));
//   H5Id dataset = open_dataset(file.get(), "buckets/14x14/latents", path);
//
// H5_CHECK(expr, file, object, what) throws WickError (Data) "FILE: OBJECT: WHAT failed (HDF5's
// innermost message)" when expr is negative, and returns expr otherwise.
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace wick::h5 {

// One process-wide lock for the (not thread-safe) serial HDF5 library; also silences HDF5's own
// error printing (errors become WickError messages instead).
class H5Lock {
 public:
  H5Lock();
 private:
  std::lock_guard<std::recursive_mutex> guard_;
};

// In a forked child only (engine/data/child_check.h): re-creates the process-wide lock unlocked, since
// a thread of the parent may have held it at fork time and no such thread exists in the child.
void reset_lock_after_fork();

// The innermost description on HDF5's error stack (then clears it); "" when empty.
std::string last_error();
[[noreturn]] void fail(const std::string& file, const std::string& object, const std::string& what,
                       const char* source, int line);

// Owns one HDF5 identifier of any kind and closes it with the matching H5?close.
class H5Id {
 public:
  H5Id() = default;
  explicit H5Id(hid_t id) : id_(id) {}
  ~H5Id() { reset(); }
  H5Id(H5Id&& other) noexcept : id_(other.id_) { other.id_ = -1; }
  H5Id& operator=(H5Id&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_;
      other.id_ = -1;
    }
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = -1;
};

// IEEE half precision as h5py stores numpy float16 (HDF5 1.10 has no predefined f16 type).
hid_t f16_type();
// Variable-length UTF-8 strings (h5py's str).
hid_t vlen_string_type();

// True when every component of a '/'-separated path exists below loc.
bool exists(hid_t loc, const std::string& path);
H5Id open_dataset(hid_t loc, const std::string& name, const std::string& file);
std::vector<int64_t> dataset_shape(hid_t dataset, const std::string& file, const std::string& name);

// Attributes of loc (the root group here): strings (variable or fixed length), integers, floats.
bool has_attribute(hid_t loc, const std::string& name);
std::string read_string_attribute(hid_t loc, const std::string& name, const std::string& file);
int64_t read_int_attribute(hid_t loc, const std::string& name, const std::string& file);
double read_float_attribute(hid_t loc, const std::string& name, const std::string& file);
void write_string_attribute(hid_t loc, const std::string& name, const std::string& value, const std::string& file);
void write_int_attribute(hid_t loc, const std::string& name, int64_t value, const std::string& file);
void write_float_attribute(hid_t loc, const std::string& name, double value, const std::string& file);
// 1-d float attributes (h5py's numpy arrays), any float or integer type on read, f64 on write.
std::vector<double> read_float_array_attribute(hid_t loc, const std::string& name, const std::string& file);
void write_float_array_attribute(hid_t loc, const std::string& name, const std::vector<double>& values,
                                 const std::string& file);

// Rows [start, start + count) of a 1-d string dataset (variable or fixed length).
std::vector<std::string> read_strings(hid_t dataset, int64_t start, int64_t count, const std::string& file,
                                      const std::string& name);

// A chunked dataset [0, row_shape...] with an unlimited first axis; intermediate groups created.
H5Id create_rows(hid_t loc, const std::string& name, hid_t file_type, const std::vector<int64_t>& row_shape,
                 int64_t chunk_rows, const std::string& file);
// Extends `dataset` from `n_before` rows to n_before + n and writes `data` (mem_type) into the new rows.
void append_rows(hid_t dataset, hid_t mem_type, const void* data, int64_t n_before, int64_t n,
                 const std::vector<int64_t>& row_shape, const std::string& file, const std::string& name);
// Reads rows [start, start + n) of an [N, row_shape...] dataset as mem_type.
void read_rows(hid_t dataset, hid_t mem_type, void* data, int64_t start, int64_t n,
               const std::vector<int64_t>& row_shape, const std::string& file, const std::string& name);

// "f16", "f32", "u8", "i64", "string", ... for messages and inspect.
std::string type_name(hid_t dataset);

}  // namespace wick::h5

#define H5_CHECK(expr, file, object, what)                                            \
  [&]() {                                                                             \
    auto h5_check_result_ = (expr);                                                   \
    if (h5_check_result_ < 0) ::wick::h5::fail((file), (object), (what), __FILE__, __LINE__); \
    return h5_check_result_;                                                          \
  }()
