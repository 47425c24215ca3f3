// metrics.jsonl: one JSON object per line, appended and flushed as each step's metrics arrive.
//
//   MetricsLog metrics(run_dir + "/metrics.jsonl");      // creates the file or continues it (resume)
//   metrics.write({.step = 10, .loss = 0.41, .lr = 1e-4, .grad_norm = 0.8, .samples_per_s = 312.0,
//                  .extra = {{"loss_ema", 0.44}}});
//   std::vector<MetricsRecord> history = read_metrics(run_dir + "/metrics.jsonl");   // for loss.png
//
// A line: {"step":10,"loss":0.41,"lr":0.0001,"grad_norm":0.8,"samples_per_s":312.0,"it_per_s":...,
// "memory_bytes":...,"time":<unix seconds>,"elapsed_s":...,<extra scalars>}. Fields not set are left
// out; a non-finite value is written as null (a skipped step's loss). A resumed run appends to the
// same file, so the steps between the last checkpoint and the interruption appear twice: readers keep
// the LAST line of each step (read_metrics does). A line cut short by a crash is ended with a newline
// before the resumed run's first line and is skipped by readers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace wick {

struct MetricsRecord {
  int64_t step = 0;
  double loss = 0.0;
  std::optional<double> lr;
  std::optional<double> grad_norm;      // before clipping
  std::optional<double> samples_per_s;
  std::optional<double> it_per_s;       // optimizer steps per second
  std::optional<int64_t> memory_bytes;  // peak device memory (host RSS on the CPU)
  std::optional<double> time;           // unix seconds; write() fills it when unset
  std::optional<double> elapsed_s;      // seconds since the run (or the resumed run) started
  std::vector<std::pair<std::string, double>> extra;  // any other scalars, by name
};

class MetricsLog {
 public:
  // Opens `path` for appending (creating it and its directory). Throws WickError (Data) naming the path.
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends one line (one write(2), no user-space buffer). Extra names must not repeat a standard
  // field's name. A failed write (full disk, I/O error) throws WickError (Data) naming the file.
  void write(const MetricsRecord& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;  // O_APPEND: each line is one write(2)
};

// One record as a JSON line (no newline).
std::string metrics_json_line(const MetricsRecord& record);

// Reads a metrics.jsonl: lines that are not JSON objects with an integer "step" are skipped; for a
// step that appears more than once the last line wins; sorted by step. Unknown numeric fields land in
// `extra`. A missing file gives an empty list; an unreadable one throws WickError (Data).
std::vector<MetricsRecord> read_metrics(const std::string& path);

}  // namespace wick
