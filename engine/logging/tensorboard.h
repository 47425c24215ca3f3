// TensorBoard event files, written by hand: TFRecord framing + hand-encoded Event/Summary protobufs.
//
//   TensorBoardWriter tensorboard(run_dir);   // run_dir/events.out.tfevents.<unix time>.<hostname>
//   tensorboard.add_scalars(step, {{"train/loss", loss}, {"train/lr", lr}});
//   tensorboard.add_image("samples", grid, step);          // an Image (encoded as PNG)
//
// Each record: u64 length (little-endian), u32 masked CRC-32C of those 8 bytes, the Event bytes, u32
// masked CRC-32C of the Event bytes; mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8. The first
// record is Event{wall_time, file_version = "brain.Event:2"}; then Event{wall_time (1, double),
// step (2, int64), summary (5)} with Summary{value (1): {tag (1), simple_value (2, float) | image (4)}}
// and Image{height (1), width (2), colorspace (3), encoded_image_string (4)}. Every event is written
// as it is made (one write(2), no user-space buffer; a failure throws WickError (Data) naming the
// file). Only one rank (rank 0) should write. A resumed run opens a new file in the same
// directory and calls mark_resumed(first step): Event{step, session_log (7) {status (1) = START}},
// on which TensorBoard drops the earlier file's values at steps >= that step (they were orphaned).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wick {

struct Image;

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven. `crc` continues an earlier
// value: crc32c(b, crc32c(a)) == crc32c(a + b). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n_bytes, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view bytes, uint32_t crc = 0) { return crc32c(bytes.data(), bytes.size(), crc); }
// The TFRecord mask applied to stored CRCs.
uint32_t mask_crc32c(uint32_t crc);

// One TFRecord around `data`: length, masked CRC of the length, data, masked CRC of the data.
std::string tfrecord_frame(std::string_view data);

// Event protobufs (the bytes inside a TFRecord).
std::string encode_file_version_event(double wall_time);
std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, double>>& scalars);
// SessionLog{status: START} at `step`: TensorBoard purges earlier events with step >= `step`.
std::string encode_session_start_event(double wall_time, int64_t step);
// colorspace: 1 gray, 3 RGB (TensorBoard's numbering); png: the encoded PNG bytes.
std::string encode_image_event(double wall_time, int64_t step, const std::string& tag, int64_t height, int64_t width,
                               int64_t colorspace, const std::vector<uint8_t>& png);

class TensorBoardWriter {
 public:
  // Creates `directory` if needed and a new event file in it (never overwrites one: a name already
  // taken gets ".1", ".2", ... appended). Throws WickError (Data) naming the path when it cannot.
  explicit TensorBoardWriter(const std::string& directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event holding every scalar (stored as float, TensorBoard's simple_value).
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  void add_scalar(const std::string& tag, double value, int64_t step) { add_scalars(step, {{tag, value}}); }
  void add_image(const std::string& tag, const Image& image, int64_t step);
  // After a resume: the first step this run will log (checkpoint step + 1), so TensorBoard discards
  // the interrupted run's values from that step on instead of showing two curves.
  void mark_resumed(int64_t first_step);
  void add_png(const std::string& tag, const std::vector<uint8_t>& png, int64_t height, int64_t width,
               int64_t channels, int64_t step);

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::string path_;
  int fd_ = -1;  // O_APPEND: each record is one write(2)
};

}  // namespace wick
