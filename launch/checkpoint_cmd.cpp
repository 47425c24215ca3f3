// `wick checkpoint inspect DIR`: prints a checkpoint's manifest, files, verification result,
// parameter count and optimizer-state summary. Exit status 0 when it verifies, 3 when not.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/latest_pointer.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "engine/checkpoint/training_state.h"
#include "launch/commands.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "runtime/utf8.h"

namespace wick::launch {
namespace {

namespace fs = std::filesystem;

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

// Best effort: a broken file is reported as such, never thrown out of the command.
void print_model(const fs::path& dir) {
  fs::path path = dir / "model.safetensors";
  if (!fs::exists(path)) {
    std::printf("model          (no model.safetensors)\n");
    return;
  }
  try {
    SafetensorsFile file = SafetensorsFile::open(path.string());
    int64_t n = 0;
    for (const std::string& name : file.names()) n += numel(file.info(name).shape);
    std::printf("model          %zu tensors, %lld parameters\n", file.names().size(), static_cast<long long>(n));
  } catch (const WickError& e) {
    std::printf("model          unreadable: %s\n", printable_utf8(e.what()).c_str());
  }
}

void print_optimizer(const fs::path& dir) {
  static const std::regex shard_name(R"(optimizer(\.rank\d+-of-\d+)?\.safetensors)");
  std::vector<fs::path> files;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error))
    if (std::regex_match(entry.path().filename().string(), shard_name)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::printf("optimizer      (no optimizer state)\n");
    return;
  }
  try {
    SafetensorsFile first = SafetensorsFile::open(files.front().string());
    OptimizerLayout layout = read_optimizer_layout(first);
    int64_t step = first.contains("step") ? first.get("step").to_vector<int64_t>().at(0) : -1;
    int64_t n8 = 0, e8 = 0, n32 = 0, e32 = 0;
    for (const OptimizerParameterLayout& p : layout.parameters) {
      if (p.eight_bit) {
        n8 += 1;
        e8 += p.numel;
      } else {
        n32 += 1;
        e32 += p.numel;
      }
    }
    uint64_t state_bytes = 0, master_bytes = 0;
    for (const fs::path& path : files) {
      SafetensorsFile file = path == files.front() ? first : SafetensorsFile::open(path.string());
      for (const std::string& name : file.names()) {
        const SafetensorsInfo& info = file.info(name);
        if (name == "step") continue;
        (name.size() > 7 && name.compare(name.size() - 7, 7, ".master") == 0 ? master_bytes : state_bytes) +=
            info.end - info.begin;
      }
    }
    std::printf("optimizer      %s, %lld steps taken, %zu file%s\n", layout.optimizer.c_str(),
                static_cast<long long>(step), files.size(), files.size() == 1 ? "" : "s (sharded)");
    std::printf("  parameters   %zu (%lld elements): %lld with 8-bit state (%lld elements), %lld with 32-bit "
                "state (%lld elements)\n",
                layout.parameters.size(), static_cast<long long>(e8 + e32), static_cast<long long>(n8),
                static_cast<long long>(e8), static_cast<long long>(n32), static_cast<long long>(e32));
    std::printf("  state        %s (%.3f bytes/element)", human_bytes(static_cast<double>(state_bytes)).c_str(),
                e8 + e32 > 0 ? static_cast<double>(state_bytes) / static_cast<double>(e8 + e32) : 0.0);
    if (master_bytes > 0) std::printf(", f32 masters of 16-bit parameters %s", human_bytes(static_cast<double>(master_bytes)).c_str());
    std::printf("\n");
  } catch (const WickError& e) {
    std::printf("optimizer      unreadable: %s\n", printable_utf8(e.what()).c_str());
  }
}

void print_training_state(const fs::path& dir) {
  fs::path path = dir / "training_state.json";
  if (!fs::exists(path)) return;
  try {
    TrainingState state = load_training_state(path.string());
    std::printf("training       step %lld, epoch %lld, sample cursor %lld, seed %llu\n",
                static_cast<long long>(state.step), static_cast<long long>(state.epoch),
                static_cast<long long>(state.sample_cursor), static_cast<unsigned long long>(state.seed));
  } catch (const WickError& e) {
    std::printf("training       unreadable: %s\n", printable_utf8(e.what()).c_str());
  }
}

int inspect(const std::string& dir_text) {
  fs::path dir = resolve_checkpoint_path(dir_text);  // <run>/checkpoints/latest: the directory it names
  if (!fs::is_directory(dir)) WICK_FAIL(Data, "checkpoint inspect: ", dir_text, " is not a directory");
  CheckpointReport report = verify_checkpoint(dir);
  if (dir == fs::path(dir_text))
    std::printf("checkpoint     %s\n", dir_text.c_str());
  else
    std::printf("checkpoint     %s (named by %s)\n", dir.string().c_str(), dir_text.c_str());
  if (report.manifest) {
    const CheckpointManifest& m = *report.manifest;
    std::printf("step           %lld\n", static_cast<long long>(m.step));
    std::printf("world size     %d\n", m.world_size);
    std::printf("created        %s by wick %s\n", m.created.c_str(), m.wick_version.c_str());
    std::printf("config hash    %s\n", m.config_hash.empty() ? "(none)" : m.config_hash.c_str());
    std::printf("files\n");
    for (const ManifestFile& f : m.files)
      std::printf("  %-40s %14llu bytes  %s\n", f.name.c_str(), static_cast<unsigned long long>(f.bytes),
                  human_bytes(static_cast<double>(f.bytes)).c_str());
  }
  print_model(dir);
  print_optimizer(dir);
  print_training_state(dir);
  std::printf("verification   %s\n", checkpoint_state_name(report.state));
  // Problems may quote bytes of a damaged file: escaped, so that the output stays UTF-8 text.
  for (const std::string& problem : report.problems) std::printf("  problem: %s\n", printable_utf8(problem).c_str());
  for (const std::string& note : report.notes) std::printf("  note: %s\n", printable_utf8(note).c_str());
  if (!report.valid())
    std::fprintf(stderr, "wick: error: checkpoint %s is %s\n", dir_text.c_str(),
                 printable_utf8(report.describe()).c_str());
  return report.valid() ? 0 : 3;
}

}  // namespace

void add_checkpoint_command(CLI::App& app) {
  CLI::App* checkpoint = app.add_subcommand("checkpoint", "Inspect training checkpoints");
  checkpoint->require_subcommand(1);
  CLI::App* inspect_cmd = checkpoint->add_subcommand(
      "inspect", "Print and verify a checkpoint directory (exit 0 when valid, 3 when not)");
  auto dir = std::make_shared<std::string>();
  inspect_cmd
      ->add_option("DIR", *dir, "A checkpoint directory (<run>/checkpoints/step_<N>, or <run>/checkpoints/latest)")
      ->required();
  inspect_cmd->callback([dir] { set_exit_status(inspect(*dir)); });
}

}  // namespace wick::launch
