// safetensors: reading every fixture written by the Python package, zero-copy loading, writing
// (round trip and byte-identical to the package), and a table of corrupt files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/atomic_file.h"
#include "runtime/safetensors.h"
#include "tests/test_data.h"

using namespace std::string_literals;

namespace wick {
namespace {

using ::testing::HasSubstr;

const std::string fixture_dir = wick::testing::test_data_dir() + "/safetensors/";

std::string temp_path(const std::string& name) {
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "wick_safetensors_test";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void append(std::vector<uint8_t>& out, T value) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

// The fixture formulas of tests/reference/make_safetensors_fixtures.py, as little-endian bytes.
std::vector<uint8_t> fixture_bytes(const std::string& kind, int64_t n) {
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t u = static_cast<uint64_t>(i);
    if (kind == "F64") append<double>(out, (i - 3) / 3.0);
    else if (kind == "F32") append<float>(out, static_cast<float>((i - 3) / 3.0));
    else if (kind == "F16") append<uint16_t>(out, f32_to_f16(static_cast<float>((i % 17 - 8) * 0.25)));
    else if (kind == "BF16") append<uint16_t>(out, f32_to_bf16(static_cast<float>((i % 17 - 8) * 0.25)));
    else if (kind == "I64") append<int64_t>(out, (i - 2) * 3000000000ll);
    else if (kind == "I32") append<int32_t>(out, static_cast<int32_t>((i - 5) * 100000));
    else if (kind == "I16") append<int16_t>(out, static_cast<int16_t>((i - 5) * 1000));
    else if (kind == "I8") append<int8_t>(out, static_cast<int8_t>((i * 13) % 256 - 128));
    else if (kind == "U8") append<uint8_t>(out, static_cast<uint8_t>((i * 29) % 256));
    else if (kind == "BOOL") append<uint8_t>(out, i % 3 == 0 ? 1 : 0);
    else if (kind == "U16") append<uint16_t>(out, static_cast<uint16_t>((i * 4099) % 65536));
    else if (kind == "U32") append<uint32_t>(out, static_cast<uint32_t>(u * 2654435761ull));
    else if (kind == "U64") append<uint64_t>(out, u * 0x9E3779B97F4A7C15ull);
    else if (kind == "F8_E4M3") append<uint8_t>(out, static_cast<uint8_t>((i * 37 + 11) % 256));
    else if (kind == "F8_E5M2") append<uint8_t>(out, static_cast<uint8_t>((i * 37 + 5) % 256));
    else ADD_FAILURE() << "unknown kind " << kind;
  }
  return out;
}

std::vector<uint8_t> tensor_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  const uint8_t* p = static_cast<const uint8_t*>(c.data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

bool inside_mapping(const SafetensorsFile& file, const Tensor& t) {
  const uint8_t* p = static_cast<const uint8_t*>(t.data());
  return p >= file.mapped_data() && p + t.nbytes() <= file.mapped_data() + file.mapped_bytes();
}

struct FixtureEntry {
  std::string name, kind;
  Shape shape;
  std::optional<DType> dtype;  // what get() returns; nullopt: raw U8 bytes
};

const std::vector<FixtureEntry> all_dtypes = {
    {"f64", "F64", {5}, DType::F64},          {"f32", "F32", {2, 3, 4}, DType::F32},
    {"f16", "F16", {3, 3}, DType::F16},       {"bf16", "BF16", {2, 5}, DType::BF16},
    {"i64", "I64", {4}, DType::I64},          {"i32", "I32", {2, 2}, DType::I32},
    {"i16", "I16", {3}, std::nullopt},        {"i8", "I8", {7}, DType::I8},
    {"u8", "U8", {2, 3}, DType::U8},          {"bool", "BOOL", {5}, DType::U8},
    {"u16", "U16", {2, 2}, std::nullopt},     {"u32", "U32", {3}, std::nullopt},
    {"u64", "U64", {2}, std::nullopt},        {"f8_e4m3", "F8_E4M3", {4, 4}, std::nullopt},
    {"f8_e5m2", "F8_E5M2", {6}, std::nullopt}, {"scalar", "F32", {}, DType::F32},
    {"empty", "F32", {0, 3}, DType::F32},
};

const std::vector<FixtureEntry> wick_dtypes = {
    {"layer.weight", "F32", {3, 4}, DType::F32}, {"layer.bias", "F32", {4}, DType::F32},
    {"norm.scale", "BF16", {6}, DType::BF16},    {"half", "F16", {2, 3}, DType::F16},
    {"double", "F64", {3}, DType::F64},          {"steps", "I64", {2}, DType::I64},
    {"ids", "I32", {5}, DType::I32},             {"bytes", "U8", {3}, DType::U8},
    {"signed", "I8", {9}, DType::I8},
};

Tensor fixture_tensor(const FixtureEntry& e) {
  std::vector<uint8_t> bytes = fixture_bytes(e.kind, numel(e.shape));
  Tensor t = Tensor::empty(e.shape, *e.dtype);
  if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
  return t;
}

// ---- reading ----
TEST(Safetensors, ReadsEveryDtypeWrittenByThePythonPackage) {
  SafetensorsFile file = SafetensorsFile::open(fixture_dir + "all_dtypes.safetensors");
  EXPECT_EQ(file.names().size(), all_dtypes.size());
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"wick_fixture", "all_dtypes"}}));
  for (const FixtureEntry& e : all_dtypes) {
    SCOPED_TRACE(e.name);
    ASSERT_TRUE(file.contains(e.name));
    const SafetensorsInfo& info = file.info(e.name);
    EXPECT_EQ(info.dtype, e.kind);
    EXPECT_EQ(info.shape, e.shape);
    EXPECT_EQ(info.wick_dtype, e.dtype);
    Tensor t = file.get(e.name);
    std::vector<uint8_t> want = fixture_bytes(e.kind, numel(e.shape));
    EXPECT_EQ(info.end - info.begin, want.size());
    if (e.dtype) {
      EXPECT_EQ(t.dtype(), *e.dtype);
      EXPECT_EQ(t.shape(), e.shape);
    } else {
      // Raw types: U8 bytes with the element size as a last axis.
      Shape raw_shape = e.shape;
      raw_shape.push_back(info.element_bits / 8);
      EXPECT_EQ(t.dtype(), DType::U8);
      EXPECT_EQ(t.shape(), raw_shape);
    }
    EXPECT_EQ(tensor_bytes(t), want);
    EXPECT_EQ(tensor_bytes(file.raw_bytes(e.name)), want);
  }
  // Spot values through the normal API.
  EXPECT_EQ(file.get("scalar").item(), static_cast<double>(static_cast<float>(-1.0)));
  EXPECT_EQ(file.get("f64").to_vector<double>()[4], 1 / 3.0);
  EXPECT_EQ(file.get("bf16").to_vector<float>()[0], -2.0f);
  EXPECT_EQ(file.get("i64").to_vector<int64_t>()[3], 3000000000ll);
  EXPECT_EQ(file.get("bool").to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0, 0, 1, 0}));
  EXPECT_EQ(file.get("empty").numel(), 0);
}

TEST(Safetensors, AlignedTensorsAreZeroCopyAndOutliveTheFileObject) {
  Tensor kept;
  {
    SafetensorsFile file = SafetensorsFile::open(fixture_dir + "all_dtypes.safetensors");
    for (const FixtureEntry& e : all_dtypes) {
      Tensor t = file.get(e.name);
      EXPECT_FALSE(t.storage()->owned()) << e.name;
      if (t.numel() > 0) {
        EXPECT_TRUE(inside_mapping(file, t)) << e.name;
      }
    }
    kept = file.get("f32");
  }
  // The mapping lives as long as a tensor holds it.
  EXPECT_EQ(tensor_bytes(kept), fixture_bytes("F32", 24));
}

TEST(Safetensors, MisalignedDataIsCopied) {
  SafetensorsFile file = SafetensorsFile::open(fixture_dir + "misaligned.safetensors");
  EXPECT_NE(file.info("b").file_offset % 4, 0u);
  EXPECT_NE(file.info("c").file_offset % 8, 0u);
  Tensor a = file.get("a"), b = file.get("b"), c = file.get("c");
  EXPECT_FALSE(a.storage()->owned());
  EXPECT_TRUE(b.storage()->owned());
  EXPECT_TRUE(c.storage()->owned());
  EXPECT_EQ(tensor_bytes(a), fixture_bytes("U8", 3));
  EXPECT_EQ(tensor_bytes(b), fixture_bytes("F32", 4));
  EXPECT_EQ(tensor_bytes(c), fixture_bytes("F64", 3));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4, 0u);
}

TEST(Safetensors, UnknownNameIsAnError) {
  SafetensorsFile file = SafetensorsFile::open(fixture_dir + "wick_dtypes.safetensors");
  try {
    file.get("nope");
    FAIL() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_THAT(e.what(), HasSubstr("no tensor named \"nope\""));
    EXPECT_THAT(e.what(), HasSubstr("wick_dtypes.safetensors"));
  }
}

// ---- writing ----
TEST(Safetensors, WriterMatchesThePythonPackageByteForByte) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const FixtureEntry& e : wick_dtypes) tensors.emplace_back(e.name, fixture_tensor(e));
  std::string path = temp_path("wick_dtypes.safetensors");
  save_safetensors(path, tensors, {{"format", "pt"}});
  EXPECT_EQ(read_file(path), read_file(fixture_dir + "wick_dtypes.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(atomic_temporary_path(path)));
  // For tests/reference/check_wick_safetensors.py: WICK_SAFETENSORS_EXPORT=dir keeps a copy.
  if (const char* dir = std::getenv("WICK_SAFETENSORS_EXPORT"))
    save_safetensors(std::string(dir) + "/wick_written.safetensors", tensors, {{"format", "pt"}, {"writer", "wick"}});
}

TEST(Safetensors, RoundTripIsBitwiseForAnyStridesDtypesAndShapes) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const FixtureEntry& e : wick_dtypes) tensors.emplace_back(e.name, fixture_tensor(e));
  Tensor base = fixture_tensor({"", "F32", {4, 5}, DType::F32});
  tensors.emplace_back("transposed", base.transpose(0, 1));                 // non-contiguous
  tensors.emplace_back("sliced", base.slice(1, 0, 5, 2));                   // strided
  tensors.emplace_back("zero_d", Tensor::scalar(2.5, DType::BF16));
  tensors.emplace_back("empty", Tensor::empty({2, 0}, DType::F16));
  std::map<std::string, std::string> metadata = {{"b", "2"}, {"a", "x\"y\\z\n"}, {"unicode", "\xc3\xa9t\xc3\xa9"}};
  std::string path = temp_path("round_trip.safetensors");
  save_safetensors(path, tensors, metadata);
  std::vector<uint8_t> bytes = read_file(path);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ(header % 8, 0u);
  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.metadata(), metadata);
  EXPECT_EQ(file.names().size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    Tensor back = file.get(name);
    EXPECT_EQ(back.dtype(), tensor.dtype());
    EXPECT_EQ(back.shape(), tensor.shape());
    EXPECT_EQ(tensor_bytes(back), tensor_bytes(tensor));
    // The package aligns every tensor to its element size (sorted by dtype size, largest first).
    EXPECT_EQ(file.info(name).file_offset % dtype_size(tensor.dtype()), 0u);
  }
  // Overwrite in place (rename over an existing file).
  save_safetensors(path, {{"only", Tensor::scalar(1.0)}});
  EXPECT_EQ(SafetensorsFile::open(path).names(), std::vector<std::string>{"only"});
}

TEST(Safetensors, WriterRejectsBadNames) {
  std::string path = temp_path("bad_names.safetensors");
  Tensor t = Tensor::scalar(1.0);
  EXPECT_THROW(save_safetensors(path, {{"a", t}, {"a", t}}), WickError);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", t}}), WickError);
  EXPECT_THROW(save_safetensors(path, {{"\xff", t}}), WickError);
}

// ---- corrupt files ----
std::string with_header(const std::string& json, const std::string& data, int64_t length = -1) {
  uint64_t n = length < 0 ? json.size() : static_cast<uint64_t>(length);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + json + data;
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

TEST(Safetensors, CorruptFilesGiveDataErrorsNamingFileAndProblem) {
  const std::string f32 = entry("a", "F32", "[1]", "[0,4]");
  struct Case {
    std::string name, bytes, expected;
  };
  const std::vector<Case> cases = {
      {"empty", "", "shorter than the 8-byte header length"},
      {"truncated_length", std::string(5, '\0'), "shorter than the 8-byte header length"},
      {"absurd_length", with_header("{}", "", 1ll << 40), "exceeds the limit"},
      {"length_past_eof", with_header("{}", "", 100), "runs past the end of the file"},
      {"bad_json", with_header("{\"a\":", ""), "not valid JSON"},
      {"bad_utf8", with_header("{\"\xff\":1}", ""), "not valid JSON"},
      {"nul_padding", with_header("{}\0\0"s, ""), "not valid JSON"},
      {"not_object", with_header("[1,2]", ""), "not a JSON object"},
      {"entry_not_object", with_header("{\"a\":3}", ""), "tensor \"a\": entry is not an object"},
      {"missing_dtype", with_header("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", std::string(4, 'x')),
       "missing \"dtype\""},
      {"missing_shape", with_header("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", std::string(4, 'x')),
       "missing \"shape\""},
      {"missing_offsets", with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", std::string(4, 'x')),
       "missing \"data_offsets\""},
      {"dtype_not_string", with_header("{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", std::string(4, 'x')),
       "\"dtype\" is not a string"},
      {"shape_not_array", with_header("{" + entry("a", "F32", "1", "[0,4]") + "}", std::string(4, 'x')),
       "\"shape\" is not an array"},
      {"unknown_dtype", with_header("{" + entry("a", "Q7", "[1]", "[0,4]") + "}", std::string(4, 'x')),
       "unknown dtype \"Q7\""},
      {"negative_extent", with_header("{" + entry("a", "F32", "[-1]", "[0,4]") + "}", std::string(4, 'x')),
       "not an integer in [0, 2^63)"},
      {"fractional_extent", with_header("{" + entry("a", "F32", "[1.5]", "[0,4]") + "}", std::string(4, 'x')),
       "not an integer in [0, 2^63)"},
      {"overflowing_shape",
       with_header("{" + entry("a", "F32", "[4294967296,4294967296]", "[0,4]") + "}", std::string(4, 'x')),
       "overflows the element count"},
      {"overflowing_bytes",
       with_header("{" + entry("a", "F64", "[4611686018427387904]", "[0,4]") + "}", std::string(4, 'x')),
       "overflows the byte count"},
      {"offsets_one_number", with_header("{" + entry("a", "F32", "[1]", "[0]") + "}", std::string(4, 'x')),
       "not an array of two integers"},
      {"negative_offset", with_header("{" + entry("a", "F32", "[1]", "[-4,0]") + "}", std::string(4, 'x')),
       "not non-negative integers"},
      {"end_before_begin", with_header("{" + entry("a", "F32", "[0]", "[4,0]") + "}", std::string(4, 'x')),
       "end before they begin"},
      {"past_data", with_header("{" + entry("a", "F32", "[2]", "[0,8]") + "}", std::string(4, 'x')),
       "run past the end of the data section (4 bytes)"},
      {"size_mismatch", with_header("{" + entry("a", "F32", "[2]", "[0,4]") + "}", std::string(4, 'x')),
       "hold 4 bytes but F32 [2] needs 8"},
      {"sub_byte_partial", with_header("{" + entry("a", "F4", "[3]", "[0,2]") + "}", std::string(2, 'x')),
       "do not fill a whole number of bytes"},
      {"overlap", with_header("{" + f32 + "," + entry("b", "F32", "[1]", "[0,4]") + "}", std::string(4, 'x')),
       "overlaps tensor"},
      {"gap", with_header("{" + f32 + "," + entry("b", "F32", "[1]", "[8,12]") + "}", std::string(12, 'x')),
       "gap of 4 bytes before tensor \"b\""},
      {"leading_gap", with_header("{" + entry("a", "F32", "[1]", "[4,8]") + "}", std::string(8, 'x')),
       "gap of 4 bytes before tensor \"a\""},
      {"trailing_bytes", with_header("{" + f32 + "}", std::string(8, 'x')), "trailing bytes"},
      {"metadata_not_object", with_header("{\"__metadata__\":[1]," + f32 + "}", std::string(4, 'x')),
       "__metadata__ is not an object"},
      {"metadata_not_string", with_header("{\"__metadata__\":{\"k\":1}," + f32 + "}", std::string(4, 'x')),
       "__metadata__ value of \"k\" is not a string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string path = temp_path("corrupt_" + c.name + ".safetensors");
    write_file(path, c.bytes);
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << "no error";
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Data);
      EXPECT_THAT(e.what(), HasSubstr(path));
      EXPECT_THAT(e.what(), HasSubstr(c.expected));
    }
  }
  try {
    SafetensorsFile::open(temp_path("does_not_exist.safetensors"));
    ADD_FAILURE() << "no error";
  } catch (const WickError& e) {
    EXPECT_THAT(e.what(), HasSubstr("does_not_exist.safetensors: cannot open"));
  }
  // Legal oddities the Python package accepts too: header padding and leading spaces, unknown
  // extra fields, empty tensors sharing an offset with a neighbour.
  std::string path = temp_path("legal_oddities.safetensors");
  write_file(path, with_header(" {" + entry("e", "F32", "[0]", "[0,0]") + ",\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                               "\"data_offsets\":[0,4],\"extra\":1}}   ", std::string(4, '\0')));
  SafetensorsFile ok = SafetensorsFile::open(path);
  EXPECT_EQ(ok.names(), (std::vector<std::string>{"e", "a"}));
  EXPECT_EQ(ok.get("a").item(), 0.0);
}

}  // namespace
}  // namespace wick

namespace wick {
namespace {

TEST(SafetensorsCopyOnWrite, LoadedTensorCanBeWrittenInPlaceWithoutChangingTheFile) {
  std::string path = ::testing::TempDir() + "/cow.safetensors";
  save_safetensors(path, {{"w", Tensor::from_vector<float>({1, 2, 3, 4}, {4})}}, {});
  {
    SafetensorsFile file = SafetensorsFile::open(path);
    Tensor w = file.get("w");
    void* before = w.data();
    w.copy_from(Tensor::from_vector<float>({9, 9, 9, 9}, {4}));
    EXPECT_EQ(w.data(), before) << "in-place update must keep the same storage";
    EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{9, 9, 9, 9}));
  }
  EXPECT_EQ(SafetensorsFile::open(path).get("w").to_vector<float>(), (std::vector<float>{1, 2, 3, 4}))
      << "the file on disk must be unchanged";
}

}  // namespace
}  // namespace wick
