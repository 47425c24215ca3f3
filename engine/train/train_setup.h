// The checks `wick train` makes before its first step, each a WickError naming what is wrong
// (Config: exit status 2, Data: 3), and the pieces of setup they guard.
//
//   Device device = select_device(config.device);             // auto: cuda:0 when a GPU is visible
//   check_output_directory(run_dir, "auto");                  // writable; `none` refuses old checkpoints
//   check_run_directory_shared(*group, run_dir);              // every rank sees it (several nodes)
//   TrainingData data = open_training_data(config.datasets[0], true);   // opened, validated, filtered
//
// Nothing here writes into the run directory except probe files it removes again.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/config/train_config.h"
#include "engine/data/latent_dataset.h"
#include "runtime/device.h"

namespace wick {

// A config's `device`: auto -> cuda:0 when a GPU is visible, else cpu; cpu, cuda, cuda:N as written
// (a CUDA device that is not there is a Config error).
Device select_device(const std::string& device);

// Creates the run directory (and parents) and checks that a file can be created in it (Config error
// naming the directory otherwise). With resume "none", a run directory that already holds
// checkpoints or metrics is a Config error (a fresh run would mix with, and replace, the old one).
void check_output_directory(const std::filesystem::path& run_dir, const std::string& resume);

// Collective, after rank 0's check_output_directory: every rank sees the run directory rank 0
// made (a file rank 0 writes there) and can create a file in it, as each must for its optimizer shard
// of every checkpoint. Else a Config error on every rank naming the first rank (and its node) that
// cannot: on several nodes output_dir must be on a shared file system, at the same path. Nothing is
// left behind. One rank: nothing to check.
void check_run_directory_shared(comm::ProcessGroup& group, const std::filesystem::path& run_dir);

struct TrainingData {
  std::shared_ptr<LatentDataset> dataset;
  std::vector<int64_t> ids;        // eligible sample ids after the label filter, ascending
  std::vector<int64_t> bucket_of;  // bucket of each id (for the sampler)
  std::vector<std::string> class_names;  // /label_names, or "class <k>" for the labels present
};

// Opens the dataset (Data error when missing, not HDF5, or not the schema), validates every sample
// when `validate` (NaN/Inf in latents or text, wrong dtypes: Data error listing the first problems)
// and applies include_labels / exclude_labels (no sample left: Config error).
TrainingData open_training_data(const DatasetConfig& dataset, bool validate);

// Throws a Data error naming the file and the sample ids when a loaded batch holds a non-finite latent.
void check_batch_finite(const Tensor& latents, const std::vector<int64_t>& ids, const std::string& path);

// Peak memory for the logs: the device's peak tensor bytes on CUDA, the process's peak resident set on
// the CPU.
int64_t peak_memory_bytes(Device device);

}  // namespace wick
