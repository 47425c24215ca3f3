// runtime/atomic_file.h: a file is replaced whole or not at all; a failed write (a full disk, here the
// file size limit) is a Data error naming the file and the reason, keeps the old file and leaves no
// temporary behind.
#include "runtime/atomic_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/file_size_limit.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("wick_atomic_file_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Names of the folder's entries, sorted.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) out.push_back(entry.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(AtomicFile, ReplacesTheFileWholeThroughATemporaryOfThisProcess) {
  fs::path dir = fresh_dir("replace");
  fs::path path = dir / "config.yaml";
  EXPECT_EQ(atomic_temporary_path(path), fs::path(path.string() + ".tmp-" + std::to_string(::getpid())));
  write_file_atomically(path, "old\n");
  EXPECT_EQ(read_text(path), "old\n");
  {
    AtomicFile file(path);
    EXPECT_TRUE(fs::exists(file.temporary_path()));
    // Small writes are buffered, a large one goes straight through; the order holds.
    const std::string big(3 << 20, 'x');
    file.write("new ");
    file.write(big);
    file.write("\n");
    EXPECT_EQ(file.bytes_written(), 4 + big.size() + 1);
    EXPECT_EQ(read_text(path), "old\n");  // untouched until commit
    file.commit();
    EXPECT_EQ(read_text(path), "new " + big + "\n");
  }
  EXPECT_EQ(entries(dir), std::vector<std::string>{"config.yaml"});
}

TEST(AtomicFile, AnAbandonedWriterRemovesItsTemporary) {
  fs::path dir = fresh_dir("abandon");
  write_file_atomically(dir / "a.txt", "kept");
  {
    AtomicFile file(dir / "a.txt");
    file.write("half");
  }
  EXPECT_EQ(read_text(dir / "a.txt"), "kept");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"a.txt"});
}

TEST(AtomicFile, AFullDiskKeepsTheOldFileNamesThePathAndLeavesNoTemporary) {
  fs::path dir = fresh_dir("full");
  fs::path path = dir / "loss.png";
  write_file_atomically(path, "the old picture");
  const std::string big(64 << 10, 'p');
  for (size_t limit : {size_t{0}, size_t{100}, size_t{(1 << 20) + 5}}) {
    SCOPED_TRACE("limit " + std::to_string(limit));
    try {
      testing::FileSizeLimit full(limit);
      AtomicFile file(path);
      for (int i = 0; i < 40; ++i) file.write(big);  // 2.6 MB: past every limit
      file.commit();
      ADD_FAILURE() << "no error";
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Data);
      EXPECT_THAT(e.what(), HasSubstr(path.string()));
      EXPECT_THAT(e.what(), HasSubstr("File too large"));
      EXPECT_THAT(e.what(), HasSubstr("was not replaced"));
    }
    EXPECT_EQ(read_text(path), "the old picture");
    EXPECT_EQ(entries(dir), std::vector<std::string>{"loss.png"});
  }
  // save_safetensors goes through it: the same error, nothing left.
  try {
    testing::FileSizeLimit full(1000);
    save_safetensors((dir / "lora.safetensors").string(),
                     {{"w", Tensor::from_vector<float>(std::vector<float>(4096, 1.0f), {4096})}});
    ADD_FAILURE() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_THAT(e.what(), HasSubstr("lora.safetensors"));
    EXPECT_THAT(e.what(), HasSubstr("File too large"));
  }
  EXPECT_EQ(entries(dir), std::vector<std::string>{"loss.png"});
}

TEST(AtomicFile, AFailedRenameRemovesTheTemporary) {
  fs::path dir = fresh_dir("rename");
  fs::create_directories(dir / "latest" / "inside");  // a non-empty directory cannot be replaced by a file
  try {
    write_file_atomically(dir / "latest", "step_00000001\n");
    ADD_FAILURE() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_THAT(e.what(), HasSubstr("cannot rename"));
    EXPECT_THAT(e.what(), HasSubstr((dir / "latest").string()));
  }
  EXPECT_EQ(entries(dir), std::vector<std::string>{"latest"});
  // replace_file (a file another library wrote) alike.
  fs::path temporary = atomic_temporary_path(dir / "data.h5");
  std::ofstream(temporary) << "hdf5 bytes";
  replace_file(temporary, dir / "data.h5");
  EXPECT_EQ(read_text(dir / "data.h5"), "hdf5 bytes");
  std::ofstream(temporary) << "more";
  EXPECT_THROW(replace_file(temporary, dir / "latest"), WickError);
  EXPECT_FALSE(fs::exists(temporary));
}

TEST(AtomicFile, WriteAllNamesTheFileAndTheReason) {
  fs::path dir = fresh_dir("append");
  fs::path path = dir / "metrics.jsonl";
  std::ofstream(path) << "";
  FILE* file = std::fopen(path.c_str(), "ab");
  ASSERT_NE(file, nullptr);
  try {
    testing::FileSizeLimit full(10);
    write_all(::fileno(file), "{\"step\": 1, \"loss\": 0.5}\n", 25, path.string(), "metrics: cannot append to");
    ADD_FAILURE() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_THAT(e.what(), HasSubstr("metrics: cannot append to " + path.string() + ": File too large"));
  }
  std::fclose(file);
}

}  // namespace
}  // namespace wick
