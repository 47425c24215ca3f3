// HDF5 C API helpers (see hdf5_util.h). Compiled only when CMake found HDF5.
#if WICK_HAS_HDF5
#include "engine/data/hdf5_util.h"

#include <cstring>
#include <new>

namespace wick::h5 {
namespace {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

herr_t keep_innermost(unsigned, const H5E_error2_t* error, void* data) {
  auto* text = static_cast<std::string*>(data);
  if (error->desc != nullptr && error->desc[0] != '\0') *text = error->desc;
  return 0;
}

std::vector<hsize_t> to_hsize(const std::vector<int64_t>& values) {
  return std::vector<hsize_t>(values.begin(), values.end());
}

std::string attribute_label(const std::string& name) { return "attribute '" + name + "'"; }

}  // namespace

H5Lock::H5Lock() : guard_(hdf5_mutex()) { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void reset_lock_after_fork() { new (&hdf5_mutex()) std::recursive_mutex(); }

std::string last_error() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_innermost, &text);
  H5Eclear2(H5E_DEFAULT);
  return text;
}

void fail(const std::string& file, const std::string& object, const std::string& what, const char* source,
          int line) {
  std::string detail = last_error();
  ::wick::detail::throw_error(ErrorKind::Data, source, line,
                              ::wick::detail::concat(file, ": ", object, ": ", what, " failed",
                                                     detail.empty() ? "" : " (" + detail + ")"));
}

void H5Id::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: H5Idec_ref(id_); break;
  }
  id_ = -1;
}

hid_t f16_type() {
  static hid_t type = [] {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    H5Tpack(t);
    H5Tlock(t);
    return t;
  }();
  return type;
}

hid_t vlen_string_type() {
  static hid_t type = [] {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    H5Tlock(t);
    return t;
  }();
  return type;
}

bool exists(hid_t loc, const std::string& path) {
  std::string prefix;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    std::string part = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (!prefix.empty()) prefix.push_back('/');
    prefix.append(part);
    if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

H5Id open_dataset(hid_t loc, const std::string& name, const std::string& file) {
  WICK_CHECK_KIND(Data, exists(loc, name), file, ": missing dataset /", name);
  return H5Id(H5_CHECK(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), file, "/" + name, "H5Dopen2"));
}

std::vector<int64_t> dataset_shape(hid_t dataset, const std::string& file, const std::string& name) {
  H5Id space(H5_CHECK(H5Dget_space(dataset), file, "/" + name, "H5Dget_space"));
  int rank = H5_CHECK(H5Sget_simple_extent_ndims(space.get()), file, "/" + name, "H5Sget_simple_extent_ndims");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0) H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), file, "/" + name, "dims");
  return std::vector<int64_t>(dims.begin(), dims.end());
}

bool has_attribute(hid_t loc, const std::string& name) {
  htri_t found = H5Aexists(loc, name.c_str());
  H5Eclear2(H5E_DEFAULT);
  return found > 0;
}

namespace {
H5Id open_attribute(hid_t loc, const std::string& name, const std::string& file) {
  WICK_CHECK_KIND(Data, has_attribute(loc, name), file, ": missing root attribute '", name, "'");
  return H5Id(H5_CHECK(H5Aopen(loc, name.c_str(), H5P_DEFAULT), file, attribute_label(name), "H5Aopen"));
}
}  // namespace

std::string read_string_attribute(hid_t loc, const std::string& name, const std::string& file) {
  H5Id attribute = open_attribute(loc, name, file);
  H5Id type(H5_CHECK(H5Aget_type(attribute.get()), file, attribute_label(name), "H5Aget_type"));
  WICK_CHECK_KIND(Data, H5Tget_class(type.get()) == H5T_STRING, file, ": root attribute '", name,
                  "' is not a string");
  H5Id space(H5_CHECK(H5Aget_space(attribute.get()), file, attribute_label(name), "H5Aget_space"));
  WICK_CHECK_KIND(Data, H5Sget_simple_extent_npoints(space.get()) == 1, file, ": root attribute '", name,
                  "' is not a single string");
  if (H5Tis_variable_str(type.get()) > 0) {
    H5Id memory(H5Tcopy(H5T_C_S1));
    H5Tset_size(memory.get(), H5T_VARIABLE);
    H5Tset_cset(memory.get(), H5Tget_cset(type.get()));
    char* text = nullptr;
    H5_CHECK(H5Aread(attribute.get(), memory.get(), &text), file, attribute_label(name), "H5Aread");
    std::string value = text != nullptr ? text : "";
    H5free_memory(text);
    return value;
  }
  size_t size = H5Tget_size(type.get());
  std::string value(size, '\0');
  H5_CHECK(H5Aread(attribute.get(), type.get(), value.data()), file, attribute_label(name), "H5Aread");
  value.resize(std::strlen(value.c_str()));
  while (!value.empty() && value.back() == ' ') value.pop_back();  // space-padded fixed strings
  return value;
}

int64_t read_int_attribute(hid_t loc, const std::string& name, const std::string& file) {
  H5Id attribute = open_attribute(loc, name, file);
  H5Id type(H5_CHECK(H5Aget_type(attribute.get()), file, attribute_label(name), "H5Aget_type"));
  WICK_CHECK_KIND(Data, H5Tget_class(type.get()) == H5T_INTEGER, file, ": root attribute '", name,
                  "' is not an integer");
  int64_t value = 0;
  H5_CHECK(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value), file, attribute_label(name), "H5Aread");
  return value;
}

double read_float_attribute(hid_t loc, const std::string& name, const std::string& file) {
  H5Id attribute = open_attribute(loc, name, file);
  H5Id type(H5_CHECK(H5Aget_type(attribute.get()), file, attribute_label(name), "H5Aget_type"));
  H5T_class_t type_class = H5Tget_class(type.get());
  WICK_CHECK_KIND(Data, type_class == H5T_FLOAT || type_class == H5T_INTEGER, file, ": root attribute '", name,
                  "' is not a number");
  double value = 0;
  H5_CHECK(H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value), file, attribute_label(name), "H5Aread");
  return value;
}

namespace {
void write_attribute(hid_t loc, const std::string& name, hid_t file_type, hid_t mem_type, const void* value,
                     const std::string& file) {
  H5Id space(H5_CHECK(H5Screate(H5S_SCALAR), file, attribute_label(name), "H5Screate"));
  H5Id attribute(H5_CHECK(H5Acreate2(loc, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), file,
                          attribute_label(name), "H5Acreate2"));
  H5_CHECK(H5Awrite(attribute.get(), mem_type, value), file, attribute_label(name), "H5Awrite");
}
}  // namespace

void write_string_attribute(hid_t loc, const std::string& name, const std::string& value, const std::string& file) {
  const char* text = value.c_str();
  write_attribute(loc, name, vlen_string_type(), vlen_string_type(), &text, file);
}
void write_int_attribute(hid_t loc, const std::string& name, int64_t value, const std::string& file) {
  write_attribute(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, file);
}
void write_float_attribute(hid_t loc, const std::string& name, double value, const std::string& file) {
  write_attribute(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, file);
}

std::vector<double> read_float_array_attribute(hid_t loc, const std::string& name, const std::string& file) {
  H5Id attribute = open_attribute(loc, name, file);
  H5Id type(H5_CHECK(H5Aget_type(attribute.get()), file, attribute_label(name), "H5Aget_type"));
  const H5T_class_t type_class = H5Tget_class(type.get());
  WICK_CHECK_KIND(Data, type_class == H5T_FLOAT || type_class == H5T_INTEGER, file, ": root attribute '", name,
                  "' is not numbers");
  H5Id space(H5_CHECK(H5Aget_space(attribute.get()), file, attribute_label(name), "H5Aget_space"));
  WICK_CHECK_KIND(Data, H5Sget_simple_extent_ndims(space.get()) <= 1, file, ": root attribute '", name, "' is not 1-d");
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  WICK_CHECK_KIND(Data, n >= 0, file, ": root attribute '", name, "' has no extent");
  std::vector<double> values(static_cast<size_t>(n));
  if (n > 0)
    H5_CHECK(H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, values.data()), file, attribute_label(name), "H5Aread");
  return values;
}

void write_float_array_attribute(hid_t loc, const std::string& name, const std::vector<double>& values,
                                 const std::string& file) {
  const hsize_t extent[1] = {static_cast<hsize_t>(values.size())};
  H5Id space(H5_CHECK(H5Screate_simple(1, extent, nullptr), file, attribute_label(name), "H5Screate_simple"));
  H5Id attribute(H5_CHECK(H5Acreate2(loc, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), file,
                          attribute_label(name), "H5Acreate2"));
  H5_CHECK(H5Awrite(attribute.get(), H5T_NATIVE_DOUBLE, values.data()), file, attribute_label(name), "H5Awrite");
}

std::vector<std::string> read_strings(hid_t dataset, int64_t start, int64_t count, const std::string& file,
                                      const std::string& name) {
  std::vector<std::string> out;
  if (count <= 0) return out;
  std::string object = "/" + name;
  H5Id type(H5_CHECK(H5Dget_type(dataset), file, object, "H5Dget_type"));
  WICK_CHECK_KIND(Data, H5Tget_class(type.get()) == H5T_STRING, file, ": dataset ", object, " is not strings");
  H5Id file_space(H5_CHECK(H5Dget_space(dataset), file, object, "H5Dget_space"));
  hsize_t offset[1] = {static_cast<hsize_t>(start)}, extent[1] = {static_cast<hsize_t>(count)};
  H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offset, nullptr, extent, nullptr), file, object,
           "H5Sselect_hyperslab");
  H5Id memory_space(H5_CHECK(H5Screate_simple(1, extent, nullptr), file, object, "H5Screate_simple"));
  out.reserve(static_cast<size_t>(count));
  if (H5Tis_variable_str(type.get()) > 0) {
    H5Id memory(H5Tcopy(H5T_C_S1));
    H5Tset_size(memory.get(), H5T_VARIABLE);
    H5Tset_cset(memory.get(), H5Tget_cset(type.get()));
    std::vector<char*> texts(static_cast<size_t>(count), nullptr);
    H5_CHECK(H5Dread(dataset, memory.get(), memory_space.get(), file_space.get(), H5P_DEFAULT, texts.data()), file,
             object, "H5Dread");
    for (char* text : texts) out.emplace_back(text != nullptr ? text : "");
    H5Dvlen_reclaim(memory.get(), memory_space.get(), H5P_DEFAULT, texts.data());
  } else {
    size_t size = H5Tget_size(type.get());
    std::vector<char> bytes(size * static_cast<size_t>(count) + 1, '\0');
    H5_CHECK(H5Dread(dataset, type.get(), memory_space.get(), file_space.get(), H5P_DEFAULT, bytes.data()), file,
             object, "H5Dread");
    for (int64_t i = 0; i < count; ++i) {
      const char* begin = bytes.data() + static_cast<size_t>(i) * size;
      out.emplace_back(begin, strnlen(begin, size));
    }
  }
  return out;
}

H5Id create_rows(hid_t loc, const std::string& name, hid_t file_type, const std::vector<int64_t>& row_shape,
                 int64_t chunk_rows, const std::string& file) {
  std::string object = "/" + name;
  std::vector<hsize_t> dims = {0}, max_dims = {H5S_UNLIMITED}, chunk = {static_cast<hsize_t>(chunk_rows)};
  for (int64_t extent : row_shape) {
    dims.push_back(static_cast<hsize_t>(extent));
    max_dims.push_back(static_cast<hsize_t>(extent));
    chunk.push_back(static_cast<hsize_t>(extent > 0 ? extent : 1));
  }
  int rank = static_cast<int>(dims.size());
  H5Id space(H5_CHECK(H5Screate_simple(rank, dims.data(), max_dims.data()), file, object, "H5Screate_simple"));
  H5Id create(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), file, object, "H5Pcreate"));
  H5_CHECK(H5Pset_chunk(create.get(), rank, chunk.data()), file, object, "H5Pset_chunk");
  H5Id link(H5_CHECK(H5Pcreate(H5P_LINK_CREATE), file, object, "H5Pcreate"));
  H5_CHECK(H5Pset_create_intermediate_group(link.get(), 1), file, object, "H5Pset_create_intermediate_group");
  return H5Id(H5_CHECK(H5Dcreate2(loc, name.c_str(), file_type, space.get(), link.get(), create.get(), H5P_DEFAULT),
                       file, object, "H5Dcreate2"));
}

void append_rows(hid_t dataset, hid_t mem_type, const void* data, int64_t n_before, int64_t n,
                 const std::vector<int64_t>& row_shape, const std::string& file, const std::string& name) {
  if (n <= 0) return;
  std::string object = "/" + name;
  std::vector<hsize_t> dims = {static_cast<hsize_t>(n_before + n)}, start = {static_cast<hsize_t>(n_before)},
                       count = {static_cast<hsize_t>(n)};
  for (hsize_t extent : to_hsize(row_shape)) {
    dims.push_back(extent);
    start.push_back(0);
    count.push_back(extent);
  }
  int rank = static_cast<int>(dims.size());
  H5_CHECK(H5Dset_extent(dataset, dims.data()), file, object, "H5Dset_extent");
  H5Id file_space(H5_CHECK(H5Dget_space(dataset), file, object, "H5Dget_space"));
  H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
           file, object, "H5Sselect_hyperslab");
  H5Id memory_space(H5_CHECK(H5Screate_simple(rank, count.data(), nullptr), file, object, "H5Screate_simple"));
  H5_CHECK(H5Dwrite(dataset, mem_type, memory_space.get(), file_space.get(), H5P_DEFAULT, data), file, object,
           "H5Dwrite");
}

void read_rows(hid_t dataset, hid_t mem_type, void* data, int64_t start, int64_t n,
               const std::vector<int64_t>& row_shape, const std::string& file, const std::string& name) {
  if (n <= 0) return;
  std::string object = "/" + name;
  std::vector<hsize_t> offset = {static_cast<hsize_t>(start)}, count = {static_cast<hsize_t>(n)};
  for (hsize_t extent : to_hsize(row_shape)) {
    offset.push_back(0);
    count.push_back(extent);
  }
  int rank = static_cast<int>(count.size());
  H5Id file_space(H5_CHECK(H5Dget_space(dataset), file, object, "H5Dget_space"));
  H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offset.data(), nullptr, count.data(), nullptr),
           file, object, "H5Sselect_hyperslab");
  H5Id memory_space(H5_CHECK(H5Screate_simple(rank, count.data(), nullptr), file, object, "H5Screate_simple"));
  H5_CHECK(H5Dread(dataset, mem_type, memory_space.get(), file_space.get(), H5P_DEFAULT, data), file, object,
           "H5Dread");
}

std::string type_name(hid_t dataset) {
  H5Id type(H5Dget_type(dataset));
  if (!type.valid()) return "?";
  std::string bits = std::to_string(H5Tget_size(type.get()) * 8);
  std::string name;
  switch (H5Tget_class(type.get())) {
    case H5T_FLOAT: name.append("f").append(bits); break;
    case H5T_INTEGER: name.append(H5Tget_sign(type.get()) == H5T_SGN_NONE ? "u" : "i").append(bits); break;
    case H5T_STRING:
      name.append("string");
      if (H5Tis_variable_str(type.get()) <= 0) name.append("[").append(std::to_string(H5Tget_size(type.get()))).append("]");
      break;
    default: name.append("other"); break;
  }
  return name;
}

}  // namespace wick::h5
#endif  // WICK_HAS_HDF5
