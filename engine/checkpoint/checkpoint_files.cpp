// Verifying a checkpoint directory (files hashed in parallel) and handing out its verified files.
#include "engine/checkpoint/checkpoint_files.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "engine/checkpoint/parallel_for.h"
#include "engine/checkpoint/sha256.h"
#include "runtime/error.h"

namespace wick {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifestName = "manifest.json";

// A file's digest, hashed through a mapping (kept in `mapping`) or read with read(2). Never throws:
// an I/O problem comes back in `problem`.
struct FileCheck {
  FileDigest digest;
  std::shared_ptr<MappedFile> mapping;
  std::string problem;
};

FileCheck hash_file(const fs::path& path, bool keep_mapped) {
  FileCheck check;
  try {
    if (keep_mapped) {
      check.mapping = MappedFile::open(path.string());
      Sha256 digest;
      digest.update(check.mapping->data(), check.mapping->size());
      check.digest = digest.finish();
    } else {
      check.digest.sha256 = sha256_file(path.string(), &check.digest.bytes);
    }
  } catch (const std::exception& e) {
    check.problem = e.what();
  }
  return check;
}

// verify_checkpoint's work; with keep_mapped, the mapping of every listed file that verified goes
// into `*mapped` (by name).
CheckpointReport check_directory(const fs::path& dir, bool check_hashes, bool keep_mapped,
                                 std::map<std::string, std::shared_ptr<MappedFile>>* mapped) {
  CheckpointReport report;
  report.dir = dir;
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    report.state = CheckpointState::Corrupt;
    report.problems.push_back("not a directory");
    return report;
  }
  if (!fs::exists(dir / kManifestName, error)) {
    report.state = CheckpointState::Incomplete;
    report.problems.push_back("no manifest.json (the writer did not finish)");
    return report;
  }
  report.state = CheckpointState::Corrupt;
  try {
    report.manifest = read_manifest(dir);
  } catch (const WickError& e) {
    report.problems.push_back(e.what());
    return report;
  }
  const CheckpointManifest& manifest = *report.manifest;
  fs::path name = dir.filename().empty() ? dir.parent_path().filename() : dir.filename();
  if (auto step = parse_checkpoint_dir_name(name.string()); step && *step != manifest.step)
    report.problems.push_back("the manifest says step " + std::to_string(manifest.step) + " but the directory is " +
                              name.string());

  // Presence and size first (cheap), then the hashes of the files that passed, in parallel.
  const size_t n_files = manifest.files.size();
  std::vector<std::string> problem(n_files);
  std::vector<size_t> to_hash;
  for (size_t i = 0; i < n_files; ++i) {
    const ManifestFile& file = manifest.files[i];
    fs::path path = dir / file.name;
    if (!fs::is_regular_file(path, error)) {
      problem[i] = file.name + ": missing";
      continue;
    }
    uint64_t bytes = fs::file_size(path, error);
    if (error || bytes != file.bytes) {
      problem[i] = file.name + ": " + std::to_string(bytes) + " bytes, the manifest says " +
                   std::to_string(file.bytes) + " (truncated or overwritten)";
      continue;
    }
    if (check_hashes) to_hash.push_back(i);
  }
  std::vector<FileCheck> checks(n_files);
  parallel_for(to_hash.size(), [&](size_t k) {
    size_t i = to_hash[k];
    checks[i] = hash_file(dir / manifest.files[i].name, keep_mapped);
  });
  for (size_t i : to_hash) {
    const ManifestFile& file = manifest.files[i];
    const FileCheck& check = checks[i];
    if (!check.problem.empty())
      problem[i] = file.name + ": " + check.problem;
    else if (check.digest.bytes != file.bytes)
      problem[i] = file.name + ": " + std::to_string(check.digest.bytes) + " bytes read, the manifest says " +
                   std::to_string(file.bytes) + " (changed while being read)";
    else if (check.digest.sha256 != file.sha256)
      problem[i] = file.name + ": SHA-256 " + check.digest.sha256 + " differs from the manifest's " + file.sha256;
  }
  std::vector<std::string> listed;
  for (size_t i = 0; i < n_files; ++i) {
    listed.push_back(manifest.files[i].name);
    if (!problem[i].empty()) report.problems.push_back(problem[i]);
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    std::string file = entry.path().filename().string();
    if (file != kManifestName && std::find(listed.begin(), listed.end(), file) == listed.end())
      report.notes.push_back(file + ": not in the manifest (ignored)");
  }
  if (report.problems.empty()) {
    report.state = CheckpointState::Valid;
    if (mapped)
      for (size_t i : to_hash) (*mapped)[manifest.files[i].name] = std::move(checks[i].mapping);
  }
  return report;
}

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) WICK_FAIL(Data, path.string(), ": cannot open: ", std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

CheckpointReport verify_checkpoint(const fs::path& checkpoint_dir, bool check_hashes) {
  return check_directory(checkpoint_dir, check_hashes, /*keep_mapped=*/false, nullptr);
}

CheckpointFiles CheckpointFiles::verify(const fs::path& dir) {
  CheckpointFiles files;
  files.dir_ = dir;
  files.verified_ = true;
  files.report_ = check_directory(dir, /*check_hashes=*/true, /*keep_mapped=*/true, &files.files_);
  return files;
}

CheckpointFiles CheckpointFiles::unverified(const fs::path& dir) {
  CheckpointFiles files;
  files.dir_ = dir;
  files.report_.dir = dir;
  files.report_.state = CheckpointState::Valid;
  return files;
}

void CheckpointFiles::check_loadable() const {
  if (!report_.valid())
    WICK_FAIL(Data, "checkpoint ", dir_.string(), " is ", report_.describe(), "; nothing is loaded from it");
}

std::vector<std::string> CheckpointFiles::names() const {
  check_loadable();
  std::vector<std::string> out;
  if (verified_) {
    if (report_.manifest)
      for (const ManifestFile& file : report_.manifest->files) out.push_back(file.name);
  } else {
    std::error_code error;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir_, error))
      if (entry.is_regular_file() && entry.path().filename() != kManifestName)
        out.push_back(entry.path().filename().string());
    if (error) WICK_FAIL(Data, "cannot list ", dir_.string(), ": ", error.message());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool CheckpointFiles::contains(const std::string& name) const {
  check_loadable();
  if (verified_) return files_.count(name) != 0;
  std::error_code error;
  return fs::is_regular_file(dir_ / name, error);
}

std::shared_ptr<MappedFile> CheckpointFiles::mapped(const std::string& name) const {
  check_loadable();
  auto found = files_.find(name);
  if (found == files_.end())
    WICK_FAIL(Data, "checkpoint ", dir_.string(), ": ", name, " is not in its manifest");
  return found->second;
}

SafetensorsFile CheckpointFiles::safetensors(const std::string& name) const {
  if (!verified_) return SafetensorsFile::open((dir_ / name).string());
  return SafetensorsFile::open(mapped(name));
}

std::string CheckpointFiles::text(const std::string& name) const {
  if (!verified_) return read_text_file(dir_ / name);
  std::shared_ptr<MappedFile> file = mapped(name);
  if (file->size() == 0) return {};
  return std::string(reinterpret_cast<const char*>(file->data()), file->size());
}

}  // namespace wick
