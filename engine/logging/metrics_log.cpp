#include "engine/logging/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "runtime/atomic_file.h"
#include "runtime/error.h"

namespace wick {
namespace {

constexpr const char* kStandardFields[] = {"step",     "loss", "lr",        "grad_norm", "samples_per_s",
                                           "it_per_s", "memory_bytes", "time", "elapsed_s"};

bool is_standard_field(const std::string& name) {
  return std::find_if(std::begin(kStandardFields), std::end(kStandardFields),
                      [&](const char* field) { return name == field; }) != std::end(kStandardFields);
}

nlohmann::json number_or_null(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

// The file's last byte, or -1 for an empty or missing file.
int last_byte(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in || in.tellg() <= 0) return -1;
  in.seekg(-1, std::ios::end);
  return in.get();
}

std::optional<double> optional_number(const nlohmann::json& line, const char* key) {
  const auto it = line.find(key);
  if (it == line.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

std::string metrics_json_line(const MetricsRecord& record) {
  nlohmann::ordered_json line;
  line["step"] = record.step;
  line["loss"] = number_or_null(record.loss);
  if (record.lr) line["lr"] = number_or_null(*record.lr);
  if (record.grad_norm) line["grad_norm"] = number_or_null(*record.grad_norm);
  if (record.samples_per_s) line["samples_per_s"] = number_or_null(*record.samples_per_s);
  if (record.it_per_s) line["it_per_s"] = number_or_null(*record.it_per_s);
  if (record.memory_bytes) line["memory_bytes"] = *record.memory_bytes;
  if (record.time) line["time"] = number_or_null(*record.time);
  if (record.elapsed_s) line["elapsed_s"] = number_or_null(*record.elapsed_s);
  for (const auto& [name, value] : record.extra) {
    WICK_CHECK(!is_standard_field(name) && !line.contains(name), "metrics: extra scalar '", name,
               "' repeats a field already in the line");
    line[name] = number_or_null(value);
  }
  return line.dump();
}

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code error;
    std::filesystem::create_directories(parent, error);
    WICK_CHECK_KIND(Data, !error, "metrics: cannot create directory ", parent.string(), ": ", error.message());
  }
  const int last = last_byte(path);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int error = errno;
    WICK_FAIL(Data, "metrics: cannot open ", path, " for appending: ", std::strerror(error));
  }
  // A line cut short by a crash: end it so the next line starts clean (readers skip the broken one).
  if (last != -1 && last != '\n') write_all(fd_, "\n", 1, path_, "metrics: cannot append to");
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::write(const MetricsRecord& record) {
  MetricsRecord stamped = record;
  if (!stamped.time)
    stamped.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string line = metrics_json_line(stamped) + "\n";
  write_all(fd_, line.data(), line.size(), path_, "metrics: cannot append to");
}

std::vector<MetricsRecord> read_metrics(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return {};
  std::ifstream in(path);
  WICK_CHECK_KIND(Data, in.good(), "metrics: cannot read ", path);
  std::map<int64_t, MetricsRecord> by_step;
  std::string text;
  while (std::getline(in, text)) {
    const nlohmann::json line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!line.is_object()) continue;
    const auto step = line.find("step");
    if (step == line.end() || !step->is_number_integer()) continue;
    MetricsRecord record;
    record.step = step->get<int64_t>();
    record.loss = optional_number(line, "loss").value_or(std::nan(""));
    record.lr = optional_number(line, "lr");
    record.grad_norm = optional_number(line, "grad_norm");
    record.samples_per_s = optional_number(line, "samples_per_s");
    record.it_per_s = optional_number(line, "it_per_s");
    if (const auto it = line.find("memory_bytes"); it != line.end() && it->is_number_integer())
      record.memory_bytes = it->get<int64_t>();
    record.time = optional_number(line, "time");
    record.elapsed_s = optional_number(line, "elapsed_s");
    for (const auto& [name, value] : line.items())
      if (!is_standard_field(name) && (value.is_number() || value.is_null()))
        record.extra.emplace_back(name, value.is_number() ? value.get<double>() : std::nan(""));
    by_step[record.step] = std::move(record);  // the last line of a step wins
  }
  std::vector<MetricsRecord> records;
  records.reserve(by_step.size());
  for (auto& [step, record] : by_step) records.push_back(std::move(record));
  return records;
}

}  // namespace wick
