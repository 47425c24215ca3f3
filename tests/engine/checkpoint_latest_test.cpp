// `latest` as a text file, read in every form a run directory may hold it (the file, the old symlink,
// the directory a copy tool makes of that symlink), repaired without deleting anything unique; the
// checks before step 1; and checkpoint saves that hit a full disk (the file size limit stands in
// for it) leaving the previous checkpoint and `latest` as they were.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/node.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_preflight.h"
#include "engine/checkpoint/latest_pointer.h"
#include "engine/checkpoint/training_state.h"
#include "engine/optim/optimizer.h"
#include "runtime/error.h"
#include "tests/file_size_limit.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("wick_checkpoint_latest_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) out.push_back(entry.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Every path under `dir` whose name holds ".tmp": a writer's leftover.
std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir))
    if (entry.path().filename().string().find(".tmp") != std::string::npos) out.push_back(entry.path().string());
  return out;
}

// A small trainable model (about 40 KB of parameters) and its SGD optimizer with momentum.
struct Trained {
  NamedParameters parameters;
  std::unique_ptr<Optimizer> optimizer;
  Trained() {
    Tensor w = Tensor::from_vector<float>(std::vector<float>(10000, 0.25f), {100, 100});
    Tensor b = Tensor::from_vector<float>(std::vector<float>(100, -1.0f), {100});
    autograd::set_requires_grad(w, true, "w");
    autograd::set_requires_grad(b, true, "b");
    parameters = {{"w", w}, {"b", b}};
    optimizer = make_optimizer("sgd", parameters, {.momentum = 0.9f});
  }
};

fs::path save(const fs::path& run, int64_t step, const Trained& trained) {
  CheckpointWriter writer(run, step);
  writer.write_model(trained.parameters);
  writer.write_optimizer(*trained.optimizer);
  TrainingState state;
  state.step = step;
  writer.write_training_state(state);
  return writer.commit(1, "hash");
}

TEST(CheckpointLatest, ReadsTheFileTheOldSymlinkAndACopiedDirectory) {
  fs::path run = fresh_dir("forms");
  Trained trained;
  const fs::path checkpoints = checkpoints_dir(run);
  EXPECT_EQ(read_latest(checkpoints).form, LatestForm::Missing);
  save(run, 1, trained);
  save(run, 2, trained);

  LatestPointer latest = read_latest(checkpoints);
  EXPECT_EQ(latest.form, LatestForm::File);
  EXPECT_EQ(latest.checkpoint, checkpoints / "step_00000002");
  EXPECT_EQ(read_text(checkpoints / "latest"), "step_00000002\n");
  EXPECT_EQ(resolve_checkpoint_path(checkpoints / "latest"), checkpoints / "step_00000002");
  EXPECT_EQ(resolve_checkpoint_path(checkpoints.string() + "/latest/"), checkpoints / "step_00000002");
  EXPECT_EQ(resolve_checkpoint_path(checkpoints / "step_00000001"), checkpoints / "step_00000001");

  // Older runs: a relative symlink.
  fs::remove(checkpoints / "latest");
  fs::create_directory_symlink("step_00000001", checkpoints / "latest");
  latest = read_latest(checkpoints);
  EXPECT_EQ(latest.form, LatestForm::Symlink);
  EXPECT_EQ(resolve_checkpoint_path(checkpoints / "latest"), checkpoints / "step_00000001");

  // cp -rL / shutil.copytree: a directory. Stale: the newest step directory with a manifest decides.
  fs::remove(checkpoints / "latest");
  fs::copy(checkpoints / "step_00000001", checkpoints / "latest", fs::copy_options::recursive);
  latest = read_latest(checkpoints);
  EXPECT_EQ(latest.form, LatestForm::Directory);
  EXPECT_FALSE(latest.checkpoint.has_value());
  EXPECT_EQ(resolve_checkpoint_path(checkpoints / "latest"), checkpoints / "step_00000002");
  // Resume from the path `latest` goes through the same function.
  ResumeChoice choice = find_resume_checkpoint(run, (checkpoints / "latest").string());
  EXPECT_EQ(choice.checkpoint, checkpoints / "step_00000002");
}

TEST(CheckpointLatest, ABadPointerIsADataErrorNamingIt) {
  fs::path run = fresh_dir("bad");
  const fs::path checkpoints = checkpoints_dir(run);
  fs::create_directories(checkpoints);
  auto error_of = [&]() -> std::string {
    try {
      resolve_checkpoint_path(checkpoints / "latest");
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Data);
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(error_of(), HasSubstr("does not exist"));
  std::ofstream(checkpoints / "latest") << "../../etc\n";
  EXPECT_THAT(error_of(), HasSubstr("expected one line naming a checkpoint directory"));
  EXPECT_EQ(read_latest(checkpoints).form, LatestForm::File);
  std::ofstream(checkpoints / "latest") << "step_00000007\n";
  EXPECT_THAT(error_of(), HasSubstr("names step_00000007"));
  EXPECT_THAT(error_of(), HasSubstr((checkpoints / "latest").string()));
}

TEST(CheckpointLatest, SavingOverACopiedDirectoryRemovesOnlyADuplicateOfAValidCheckpoint) {
  fs::path run = fresh_dir("duplicate");
  Trained trained;
  const fs::path checkpoints = checkpoints_dir(run);
  save(run, 1, trained);
  save(run, 2, trained);
  fs::remove(checkpoints / "latest");
  fs::copy(checkpoints / "step_00000002", checkpoints / "latest", fs::copy_options::recursive);
  save(run, 3, trained);  // before this fix: "cannot rename .../latest.tmp-... to .../latest: Is a directory"
  EXPECT_EQ(read_latest(checkpoints).form, LatestForm::File);
  EXPECT_EQ(read_latest(checkpoints).checkpoint, checkpoints / "step_00000003");
  EXPECT_EQ(entries(checkpoints), (std::vector<std::string>{"latest", "step_00000001", "step_00000002", "step_00000003"}));
  for (int step : {1, 2, 3}) EXPECT_TRUE(verify_checkpoint(checkpoints / checkpoint_dir_name(step)).valid()) << step;
}

TEST(CheckpointLatest, ACopiedDirectoryIsRestoredMovedAsideOrRemovedNeverLost) {
  fs::path run = fresh_dir("repair");
  Trained trained;
  const fs::path checkpoints = checkpoints_dir(run);
  save(run, 1, trained);
  save(run, 2, trained);

  // Its step directory is gone: it becomes that step again.
  fs::remove(checkpoints / "latest");
  fs::rename(checkpoints / "step_00000002", checkpoints / "latest");
  LatestRepair repair = repair_latest(checkpoints);
  EXPECT_TRUE(repair.changed);
  EXPECT_THAT(repair.message, HasSubstr("renamed to " + (checkpoints / "step_00000002").string()));
  EXPECT_TRUE(verify_checkpoint(checkpoints / "step_00000002").valid());
  EXPECT_EQ(read_latest(checkpoints).checkpoint, checkpoints / "step_00000002");

  // A copy of a checkpoint that no longer verifies: kept (moved aside), the broken one too.
  fs::remove(checkpoints / "latest");
  fs::copy(checkpoints / "step_00000002", checkpoints / "latest", fs::copy_options::recursive);
  {
    std::fstream file(checkpoints / "step_00000002" / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(200);
    file.put('\x7f');
  }
  repair = repair_latest(checkpoints);
  EXPECT_THAT(repair.message, HasSubstr("not a copy of a valid checkpoint"));
  std::vector<std::string> names = entries(checkpoints);
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0].rfind("latest.moved-", 0), 0u) << names[0];
  EXPECT_TRUE(verify_checkpoint(checkpoints / names[0], false).manifest.has_value());
  EXPECT_EQ(names[1], "step_00000001");
  EXPECT_EQ(names[2], "step_00000002");

  // Not a checkpoint at all (the user's own folder): moved aside with what it holds.
  fs::create_directories(checkpoints / "latest");
  std::ofstream(checkpoints / "latest" / "notes.txt") << "mine";
  repair = repair_latest(checkpoints);
  EXPECT_THAT(repair.message, HasSubstr("nothing deleted"));
  EXPECT_EQ(read_latest(checkpoints).form, LatestForm::Missing);
  int n_moved = 0;
  for (const std::string& name : entries(checkpoints))
    if (name.rfind("latest.moved-", 0) == 0) n_moved += 1 + (fs::exists(checkpoints / name / "notes.txt") ? 10 : 0);
  EXPECT_EQ(n_moved, 12);  // two moved folders, one holding notes.txt

  // A file or a symlink is left alone.
  save(run, 3, trained);
  EXPECT_FALSE(repair_latest(checkpoints).changed);
}

TEST(CheckpointLatest, PruningNeverRemovesWhatTheFileOrTheOldSymlinkNames) {
  fs::path run = fresh_dir("prune");
  Trained trained;
  const fs::path checkpoints = checkpoints_dir(run);
  for (int step = 1; step <= 4; ++step) save(run, step, trained);
  std::ofstream(checkpoints / "latest") << "step_00000002\n";  // as a user might point it back
  PruneReport pruned = prune_checkpoints(run, 1);
  EXPECT_EQ(entries(checkpoints), (std::vector<std::string>{"latest", "step_00000002", "step_00000004"}));
  fs::remove(checkpoints / "latest");
  fs::create_directory_symlink("step_00000002", checkpoints / "latest");
  save(run, 5, trained);  // the symlink is replaced by the file...
  EXPECT_EQ(read_latest(checkpoints).form, LatestForm::File);
  fs::remove(checkpoints / "latest");
  fs::create_directory_symlink("step_00000002", checkpoints / "latest");
  pruned = prune_checkpoints(run, 1);  // ...and an old symlink still protects its target
  EXPECT_EQ(entries(checkpoints), (std::vector<std::string>{"latest", "step_00000002", "step_00000005"}));
}

// A writer that exited but was never reaped (a rank orphaned under a container's first process that
// does not reap) is a zombie: its pid answers kill(pid, 0), yet its staging folder is a leftover.
TEST(CheckpointLatest, PruningRemovesTheLeftoversOfAZombieWriterAndKeepsALiveOnes) {
  fs::path run = fresh_dir("zombie");
  Trained trained;
  const fs::path checkpoints = checkpoints_dir(run);
  save(run, 1, trained);
  const pid_t zombie = ::fork();
  ASSERT_GE(zombie, 0);
  if (zombie == 0) ::_exit(0);
  const pid_t sleeper = ::fork();
  ASSERT_GE(sleeper, 0);
  if (sleeper == 0) {
    ::pause();
    ::_exit(0);
  }
  std::string state;
  for (int i = 0; i < 2000 && state != "Z"; ++i) {  // until the kernel shows the first child exited
    std::ifstream stat("/proc/" + std::to_string(zombie) + "/stat");
    std::string text;
    std::getline(stat, text);
    const size_t end = text.rfind(')');
    state = end == std::string::npos ? "" : text.substr(end + 2, 1);
    if (state != "Z") ::usleep(1000);
  }
  ASSERT_EQ(state, "Z");
  ASSERT_EQ(::kill(zombie, 0), 0);  // what a pid check alone sees: "alive"
  const std::string dead_name = "step_00000002.tmp-" + std::to_string(zombie);
  const std::string live_name = "step_00000003.tmp-" + std::to_string(sleeper);
  fs::create_directories(checkpoints / dead_name);
  fs::create_directories(checkpoints / live_name);
  PruneReport pruned = prune_checkpoints(run, 0);
  ::kill(sleeper, SIGKILL);
  ::waitpid(sleeper, nullptr, 0);
  ::waitpid(zombie, nullptr, 0);
  EXPECT_EQ(entries(checkpoints), (std::vector<std::string>{"latest", "step_00000001", live_name}));
  EXPECT_NE(std::find(pruned.removed.begin(), pruned.removed.end(), checkpoints / dead_name), pruned.removed.end());
}

TEST(CheckpointWriteFailure, AFullDiskLeavesThePreviousCheckpointAndLatestAndNoPartialFiles) {
  fs::path run = fresh_dir("full");
  Trained trained;
  const fs::path checkpoints = checkpoints_dir(run);
  save(run, 1, trained);
  const std::string latest_before = read_text(checkpoints / "latest");
  // 4 KB per file: training_state.json fits, model.safetensors (40 KB) does not.
  for (const char* stage : {"model", "optimizer"}) {
    SCOPED_TRACE(stage);
    try {
      testing::FileSizeLimit full(4096);
      CheckpointWriter writer(run, 2);
      writer.write_training_state(TrainingState{.step = 2});
      if (std::string(stage) == "model") writer.write_model(trained.parameters);
      writer.write_optimizer(*trained.optimizer);
      writer.commit(1, "hash");
      ADD_FAILURE() << "no error";
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Data);
      EXPECT_THAT(e.what(), HasSubstr(std::string(stage) + ".safetensors"));
      EXPECT_THAT(e.what(), HasSubstr("File too large"));
      EXPECT_THAT(e.what(), HasSubstr((checkpoints / "step_00000002.tmp-").string()));
    }
    EXPECT_EQ(entries(checkpoints), (std::vector<std::string>{"latest", "step_00000001"}));
    EXPECT_EQ(read_text(checkpoints / "latest"), latest_before);
    EXPECT_TRUE(verify_checkpoint(checkpoints / "step_00000001").valid());
    EXPECT_TRUE(temporaries(run).empty());
  }
  // The disk has room again: the next save works and moves `latest`.
  save(run, 2, trained);
  EXPECT_EQ(read_latest(checkpoints).checkpoint, checkpoints / "step_00000002");
}

TEST(CheckpointPreflight, NotEnoughSpaceIsADataErrorNamingTheFolderBothSizesAndTheOverride) {
  fs::path run = fresh_dir("space");
  Trained trained;
  const fs::path checkpoints = checkpoints_dir(run);
  ::unsetenv(kSkipSpaceCheckVariable);
  // No checkpoint: the estimate, or a note when there is none.
  PreflightReport report = check_checkpoint_target(run, {.free_bytes = 100});
  EXPECT_EQ(report.needed_bytes, 0u);
  EXPECT_THAT(report.notes.at(0), HasSubstr("free-space check skipped"));
  report = check_checkpoint_target(run, {.estimate_bytes = 50, .free_bytes = 100});
  EXPECT_EQ(report.needed_bytes, 50u);
  EXPECT_THAT(report.basis, HasSubstr("estimate"));
  EXPECT_THROW(check_checkpoint_target(run, {.estimate_bytes = 500, .free_bytes = 100}), WickError);

  // With a checkpoint: the size of the newest one, whatever the estimate.
  const fs::path dir = save(run, 1, trained);
  uint64_t bytes = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) bytes += entry.file_size();
  report = check_checkpoint_target(run, {.estimate_bytes = 1, .free_bytes = bytes});
  EXPECT_EQ(report.needed_bytes, bytes);
  EXPECT_THAT(report.basis, HasSubstr("step_00000001"));
  try {
    check_checkpoint_target(run, {.free_bytes = bytes - 1});
    ADD_FAILURE() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_THAT(e.what(), HasSubstr("not enough free space for the next checkpoint in " + checkpoints.string()));
    EXPECT_THAT(e.what(), HasSubstr(format_bytes(bytes) + " needed"));
    EXPECT_THAT(e.what(), HasSubstr("WICK_SKIP_SPACE_CHECK=1"));
  }
  // The real file system (statvfs) has room for 40 KB.
  report = check_checkpoint_target(run);
  EXPECT_GE(report.free_bytes, report.needed_bytes);
  EXPECT_GT(report.free_bytes, 0u);
  // The override.
  ::setenv(kSkipSpaceCheckVariable, "1", 1);
  report = check_checkpoint_target(run, {.free_bytes = 0});
  ::unsetenv(kSkipSpaceCheckVariable);
  EXPECT_EQ(report.needed_bytes, 0u);
  EXPECT_THAT(report.notes.at(0), HasSubstr("WICK_SKIP_SPACE_CHECK=1"));
  EXPECT_EQ(format_bytes(1500000000), "1.5 GB");
  EXPECT_EQ(format_bytes(12), "12 B");
}

TEST(CheckpointPreflight, AFolderThatCannotBeWrittenAndALatestThatCannotBeReplacedStopTheRun) {
  fs::path run = fresh_dir("unwritable");
  std::ofstream(run / "checkpoints") << "a file where the folder goes";
  try {
    check_checkpoint_target(run);
    ADD_FAILURE() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr(checkpoints_dir(run).string()));
  }
  fs::remove(run / "checkpoints");
  // A copied `latest` directory is cleared before step 1, and a note says how.
  Trained trained;
  save(run, 1, trained);
  fs::remove(checkpoints_dir(run) / "latest");
  fs::copy(checkpoints_dir(run) / "step_00000001", checkpoints_dir(run) / "latest", fs::copy_options::recursive);
  PreflightReport report = check_checkpoint_target(run, {.verified = checkpoints_dir(run) / "step_00000001"});
  ASSERT_FALSE(report.notes.empty());
  EXPECT_THAT(report.notes[0], HasSubstr("a copy of " + (checkpoints_dir(run) / "step_00000001").string()));
  EXPECT_EQ(entries(checkpoints_dir(run)), (std::vector<std::string>{"latest", "step_00000001"}));
  EXPECT_EQ(read_latest(checkpoints_dir(run)).checkpoint, checkpoints_dir(run) / "step_00000001");
}

}  // namespace
}  // namespace wick
