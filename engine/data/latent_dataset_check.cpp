// LatentDataset::check_in_child (engine/data/latent_dataset.h): before wick's process opens a latent
// dataset, a forked child does the same libhdf5 reads under a time and an address-space limit
// (engine/data/child_check.h); docs/troubleshooting.md "A damaged or hostile file".
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "engine/data/child_check.h"
#include "engine/data/latent_dataset.h"

#if WICK_HAS_HDF5
#include "engine/data/hdf5_util.h"

namespace wick {

using h5::H5Lock;

// The child does what the parent will: open, validate, and read every variable-length string (the
// captions and sources; open reads the attributes and /label_names, validate the sample prompts).
void LatentDataset::check_in_child(const std::string& path) {
  const char* skip = std::getenv("WICK_DATASET_CHECK");
  if (skip != nullptr && std::string(skip) == "0") return;
  const double mib = 1024.0 * 1024.0;
  const auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  ChildCheckLimits limits;
  limits.timeout_seconds = 60 + static_cast<double>(file_bytes) / (50 * mib);
  limits.extra_address_space_bytes = (int64_t{1} << 30) + 4 * file_bytes;
  auto positive_env = [&](const char* name) -> double {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') return 0;
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    WICK_CHECK_KIND(Config, end != text && *end == '\0' && value > 0, name, "='", text,
                    "' must be a positive number");
    return value;
  };
  if (double seconds = positive_env("WICK_DATASET_CHECK_TIMEOUT"); seconds > 0) limits.timeout_seconds = seconds;
  if (double limit = positive_env("WICK_DATASET_CHECK_MEMORY_MIB"); limit > 0)
    limits.extra_address_space_bytes = static_cast<int64_t>(limit * mib);

  // Held across the fork so that no other thread of this process is inside libhdf5 when the child's copy
  // of the library is made; the child re-creates the lock unlocked.
  std::optional<H5Lock> parent_lock(std::in_place);
  const ChildCheckResult result = run_in_child(
      [&] {
        h5::reset_lock_after_fork();
        std::shared_ptr<LatentDataset> dataset = open_in_process(path);
        dataset->validate();
        dataset->read_every_string();
      },
      limits);
  parent_lock.reset();
  using Outcome = ChildCheckResult::Outcome;
  const char* hint = " (wick reads a latent dataset in a child process before opening it; the file is damaged or "
                     "crafted: rebuild it with wick dataset encode)";
  switch (result.outcome) {
    case Outcome::Passed: return;
    case Outcome::Threw:
      throw WickError(result.error_kind, result.message);  // what the parent's own open would have said
    case Outcome::Signaled:
      WICK_FAIL(Data, path, ": libhdf5 crashed (", signal_name(result.signal_number), ") reading the file", hint);
    case Outcome::SanitizerReport:
      WICK_FAIL(Data, path, ": reading the file ended in a memory error (", result.message, ")", hint);
    case Outcome::TimedOut:
      WICK_FAIL(Data, path, ": libhdf5 did not finish reading the file within ", limits.timeout_seconds,
                " s and was stopped", hint, "; on a slow file system raise WICK_DATASET_CHECK_TIMEOUT (seconds)");
    case Outcome::OutOfMemory:
      WICK_FAIL(Data, path, ": reading the file needed more than ",
                static_cast<int64_t>(static_cast<double>(limits.extra_address_space_bytes) / mib),
                " MiB of memory, more than a file of ", file_bytes, " bytes can justify", hint,
                "; WICK_DATASET_CHECK_MEMORY_MIB raises the limit");
    case Outcome::Failed:
      WICK_FAIL(Data, path, ": could not check the file in a child process (", result.message,
                "); WICK_DATASET_CHECK=0 opens it without the check");
  }
}

}  // namespace wick
#endif
