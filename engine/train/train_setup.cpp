#include "engine/train/train_setup.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <system_error>
#include <thread>

#include "engine/checkpoint/checkpoint.h"
#include "runtime/memory.h"
#include "runtime/ops/reduce.h"

namespace fs = std::filesystem;

namespace wick {

Device select_device(const std::string& name) {
  if (name == "auto") return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
  Device device = parse_device(name);
  if (device.is_cuda())
    WICK_CHECK_KIND(Config, device.index < cuda_device_count(), "device: ", name, " is not available (",
                    cuda_device_count(), " CUDA devices visible", cuda_compiled() ? "" : "; wick was built without CUDA",
                    ")");
  return device;
}

void check_output_directory(const fs::path& run_dir, const std::string& resume) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  WICK_CHECK_KIND(Config, !ec && fs::is_directory(run_dir), "output directory ", run_dir.string(),
                  " cannot be created: ", ec ? ec.message() : std::string("a file of that name exists"),
                  " (check output_dir and name)");
  const fs::path probe = run_dir / (".write-test-" + std::to_string(::getpid()));
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  WICK_CHECK_KIND(Config, f != nullptr, "output directory ", run_dir.string(),
                  " is not writable (check output_dir, or the permissions)");
  std::fclose(f);
  fs::remove(probe, ec);
  if (resume != "none") return;
  bool has_checkpoints = false;
  if (fs::is_directory(checkpoints_dir(run_dir), ec))
    for (const auto& entry : fs::directory_iterator(checkpoints_dir(run_dir), ec))
      has_checkpoints = has_checkpoints || parse_checkpoint_dir_name(entry.path().filename().string()).has_value();
  WICK_CHECK_KIND(Config, !has_checkpoints && !fs::exists(run_dir / "metrics.jsonl"), "--resume none: ",
                  run_dir.string(), " already holds a run (checkpoints or metrics.jsonl); continue it with --resume ",
                  "auto, or choose another name / remove the directory");
}

void check_run_directory_shared(comm::ProcessGroup& group, const fs::path& run_dir) {
  if (group.size() == 1) return;
  const int rank = group.rank();
  // A name no earlier job used: rank 0's pid and clock, the same on every rank.
  Tensor token = Tensor::from_vector<int64_t>(
      {rank == 0 ? static_cast<int64_t>(::getpid()) * 1000003 +
                       std::chrono::steady_clock::now().time_since_epoch().count() % 1000003
                 : 0},
      {1}, group.device());
  group.broadcast(token, 0);
  const std::string suffix = std::to_string(token.to_vector<int64_t>()[0]);
  const fs::path marker = run_dir / (".shared-check-" + suffix);
  std::error_code ec;
  if (rank == 0) {
    // Markers of an earlier start killed between writing and removing its marker.
    for (const fs::directory_entry& entry : fs::directory_iterator(run_dir, ec))
      if (entry.path().filename().string().rfind(".shared-check-", 0) == 0) fs::remove(entry.path(), ec);
    std::FILE* f = std::fopen(marker.c_str(), "wb");
    WICK_CHECK_KIND(Config, f != nullptr, "output directory ", run_dir.string(), ": cannot create ", marker.string());
    std::fclose(f);
  }
  group.barrier();
  // Per rank: sees rank 0's file, can create its own, its node.
  int32_t sees = 1, writes = 1;
  if (rank != 0) {
    // A network file system may show another node's new file late: look for up to 10 s.
    for (int attempt = 0; attempt < 50 && !fs::exists(marker, ec); ++attempt)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    sees = fs::exists(marker, ec) ? 1 : 0;
    const fs::path probe = run_dir / (".write-test-" + suffix + "-rank" + std::to_string(rank));
    std::FILE* f = std::fopen(probe.c_str(), "wb");
    writes = f != nullptr ? 1 : 0;
    if (f != nullptr) std::fclose(f);
    fs::remove(probe, ec);
  }
  Tensor mine = Tensor::from_vector<int32_t>({sees, writes, group.node()}, {3}, group.device());
  Tensor all = Tensor::empty({3 * static_cast<int64_t>(group.size())}, DType::I32, group.device());
  group.all_gather(mine, all);
  if (rank == 0) fs::remove(marker, ec);
  const std::vector<int32_t> status = all.to_vector<int32_t>();
  int n_failing = 0, first = -1;
  for (int r = 0; r < group.size(); ++r)
    if (status[3 * r] == 0 || status[3 * r + 1] == 0) {
      if (first < 0) first = r;
      ++n_failing;
    }
  if (first < 0) return;
  const bool unseen = status[3 * first] == 0;
  WICK_FAIL(Config, "output directory ", run_dir.string(), ": rank ", first, " (node ", status[3 * first + 2], ")",
            n_failing > 1 ? " and " + std::to_string(n_failing - 1) + " other rank(s)" : std::string(),
            unseen ? " cannot see the run directory rank 0 made (a file rank 0 wrote there is not there)"
                   : " cannot create a file in the run directory",
            ", but every rank writes its optimizer shard into each checkpoint: on several nodes, output_dir must be "
            "on a file system every node shares, at the same path (an absolute path; a relative one is taken from "
            "each rank's working directory)");
}

TrainingData open_training_data(const DatasetConfig& d, bool validate) {
  TrainingData out;
  out.dataset = LatentDataset::open(d.path);
  if (validate) {
    ValidationReport report = out.dataset->validate();
    if (!report.ok()) {
      std::string problems;
      for (size_t i = 0; i < std::min<size_t>(3, report.errors.size()); ++i)
        problems += (i ? "; " : "") + report.errors[i];
      WICK_FAIL(Data, d.path, ": the dataset is invalid (", report.errors.size(),
                report.errors.size() == 1 ? " problem): " : " problems): ", problems,
                report.errors.size() > 3 ? "; ..." : "", " (wick dataset inspect ", d.path, " lists them all)");
    }
  }
  ClassFilter filter{d.include_labels, d.exclude_labels};
  out.ids = select_ids(*out.dataset, filter);
  WICK_CHECK_KIND(Config, !out.ids.empty(), d.path, ": no sample is left after include_labels / exclude_labels");
  out.bucket_of.reserve(out.ids.size());
  for (int64_t id : out.ids) out.bucket_of.push_back(out.dataset->bucket_of(id));
  const auto& names = out.dataset->attributes().label_names;
  if (!names.empty()) {
    out.class_names = names;
  } else if (out.dataset->has_labels()) {
    std::set<int64_t> labels;
    for (int64_t id : out.ids) labels.insert(out.dataset->label_of(id));
    int64_t top = labels.empty() ? -1 : *labels.rbegin();
    for (int64_t k = 0; k <= top; ++k) out.class_names.push_back("class " + std::to_string(k));
  }
  return out;
}

void check_batch_finite(const Tensor& latents, const std::vector<int64_t>& ids, const std::string& path) {
  if (std::isfinite(sum(latents).item())) return;
  std::vector<float> values = latents.to(DType::F32).to_vector<float>();
  const int64_t per_sample = ids.empty() ? 0 : latents.numel() / static_cast<int64_t>(ids.size());
  std::string bad;
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < per_sample; ++j)
      if (!std::isfinite(values[i * per_sample + j])) {
        bad += (bad.empty() ? "" : ", ") + std::to_string(ids[i]);
        break;
      }
  WICK_FAIL(Data, path, ": non-finite latents (NaN or Inf) in sample ids ", bad.empty() ? "?" : bad,
            " (wick dataset inspect ", path, ")");
}

int64_t peak_memory_bytes(Device device) {
  if (device.is_cuda()) return memory_stats(device).peak_bytes;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace wick
