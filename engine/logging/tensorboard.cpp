#include "engine/logging/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "engine/logging/image.h"
#include "runtime/atomic_file.h"
#include "runtime/error.h"

namespace wick {
namespace {

// ---- CRC-32C ----

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    table[byte] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// ---- protobuf wire format ----
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (uint64_t{field} << 3) | type); }
void put_fixed(std::string& out, const void* value, size_t n_bytes) {  // little-endian host (x86, ARM)
  out.append(static_cast<const char*>(value), n_bytes);
}
void put_double(std::string& out, uint32_t field, double value) {
  put_key(out, field, kFixed64);
  put_fixed(out, &value, 8);
}
void put_float(std::string& out, uint32_t field, float value) {
  put_key(out, field, kFixed32);
  put_fixed(out, &value, 4);
}
void put_int(std::string& out, uint32_t field, int64_t value) {  // int64: negative values take 10 bytes
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(value));
}
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event fields.
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5, kEventSessionLog = 7;
constexpr uint32_t kSessionLogStatus = 1, kSessionLogStart = 1;  // SessionLog.status, SessionStatus.START
// Summary.value; Summary.Value fields; Summary.Image fields.
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2, kValueImage = 4;
constexpr uint32_t kImageHeight = 1, kImageWidth = 2, kImageColorspace = 3, kImageEncoded = 4;

std::string event_with_summary(double wall_time, int64_t step, const std::string& summary) {
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_int(event, kEventStep, step);
  put_bytes(event, kEventSummary, summary);
  return event;
}

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n_bytes, uint32_t crc) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n_bytes; ++i) crc = kCrc32cTable[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tfrecord_frame(std::string_view data) {
  std::string record;
  record.reserve(data.size() + 16);
  const uint64_t length = data.size();
  put_fixed(record, &length, 8);
  const uint32_t length_crc = mask_crc32c(crc32c(record.data(), 8));
  put_fixed(record, &length_crc, 4);
  record.append(data);
  const uint32_t data_crc = mask_crc32c(crc32c(data));
  put_fixed(record, &data_crc, 4);
  return record;
}

std::string encode_file_version_event(double wall_time) {
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_bytes(event, kEventFileVersion, "brain.Event:2");
  return event;
}

std::string encode_session_start_event(double wall_time, int64_t step) {
  std::string session_log;
  put_int(session_log, kSessionLogStatus, kSessionLogStart);
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_int(event, kEventStep, step);
  put_bytes(event, kEventSessionLog, session_log);
  return event;
}

std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string summary_value;
    put_bytes(summary_value, kValueTag, tag);
    put_float(summary_value, kValueSimpleValue, static_cast<float>(value));
    put_bytes(summary, kSummaryValue, summary_value);
  }
  return event_with_summary(wall_time, step, summary);
}

std::string encode_image_event(double wall_time, int64_t step, const std::string& tag, int64_t height, int64_t width,
                               int64_t colorspace, const std::vector<uint8_t>& png) {
  std::string image;
  put_int(image, kImageHeight, height);
  put_int(image, kImageWidth, width);
  put_int(image, kImageColorspace, colorspace);
  put_bytes(image, kImageEncoded, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
  std::string summary_value;
  put_bytes(summary_value, kValueTag, tag);
  put_bytes(summary_value, kValueImage, image);
  std::string summary;
  put_bytes(summary, kSummaryValue, summary_value);
  return event_with_summary(wall_time, step, summary);
}

// ---- the writer ----

TensorBoardWriter::TensorBoardWriter(const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  WICK_CHECK_KIND(Data, !error, "tensorboard: cannot create directory ", directory, ": ", error.message());
  const double now = unix_time_now();
  const std::string base = (std::filesystem::path(directory) /
                            ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host_name()))
                               .string();
  int open_error = 0;
  for (int attempt = 0; attempt < 1000 && fd_ < 0; ++attempt) {
    path_ = attempt == 0 ? base : base + "." + std::to_string(attempt);
    // O_EXCL: fails when the file exists, never overwrites.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    open_error = errno;
    if (fd_ < 0 && open_error != EEXIST) break;
  }
  WICK_CHECK_KIND(Data, fd_ >= 0, "tensorboard: cannot create ", path_, ": ", std::strerror(open_error));
  write_record(encode_file_version_event(now));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::write_record(const std::string& event) {
  const std::string record = tfrecord_frame(event);
  write_all(fd_, record.data(), record.size(), path_, "tensorboard: cannot append to");
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  if (scalars.empty()) return;
  write_record(encode_scalars_event(unix_time_now(), step, scalars));
}

void TensorBoardWriter::mark_resumed(int64_t first_step) {
  write_record(encode_session_start_event(unix_time_now(), first_step));
}

void TensorBoardWriter::add_image(const std::string& tag, const Image& image, int64_t step) {
  add_png(tag, encode_png(image), image.height, image.width, image.channels, step);
}

void TensorBoardWriter::add_png(const std::string& tag, const std::vector<uint8_t>& png, int64_t height,
                                int64_t width, int64_t channels, int64_t step) {
  WICK_CHECK(channels == 1 || channels == 3 || channels == 4, "tensorboard: add_png: ", channels,
             " channels (1, 3 or 4)");
  write_record(encode_image_event(unix_time_now(), step, tag, height, width, channels, png));
}

}  // namespace wick
