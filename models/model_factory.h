// Building the model a training config describes, through the architecture registry: the base
// (loaded and frozen, or initialized), then network.type: `full` trains every parameter, `lora` /
// `dora` wrap the target layers (network.target patterns or the architecture's presets) with adapters
// and train only those; with network.conv > 0 the architecture's conv targets get LoCon adapters too
// (convolutions larger than 1x1 at network.conv's rank and conv_alpha, their blocks' Linear and 1x1 layers
// at network.linear's).
//
//   auto ds = LatentDataset::open(config.datasets[0].path);
//   std::shared_ptr<DiffusionModel> model = build_model(config, dataset_geometry(*ds), Device::cpu());
//   save_model_weights(*model, config, "output/run/model", step);   // network.type full: model/run.safetensors
//
// Parameters are initialized from train.seed (the same model on every rank and device); the
// parameter dtype is compute_dtype(config).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "comm/process_group.h"
#include "engine/config/train_config.h"
#include "engine/data/latent_dataset.h"
#include "models/architecture.h"
#include "runtime/device.h"

namespace wick {

// The geometry of a dataset: latent channels, every bucket's latent size, text and pooled widths.
DataGeometry dataset_geometry(const LatentDataset& data);

// The compute dtype of a run: train.mixed_precision when set (bf16 / f16), else model.dtype. The
// model's parameters are stored in it (the optimizer keeps f32 masters of 16-bit trainable
// parameters). A 16-bit model.dtype that contradicts mixed_precision is a Config error.
DType compute_dtype(const ModelConfig& model, const TrainSection& train);

// The model, ready to train (see the top of this file). `data` may lack latent sizes (no dataset at
// hand) when the architecture can read its sizes from the base weights. A DoRA's magnitude takes the
// orientation `lora_format` carries (models/lora_files.h dora_axis_for).
std::shared_ptr<DiffusionModel> build_model(const ModelConfig& model, const NetworkConfig& network,
                                            const TrainSection& train, LoraFormat lora_format,
                                            const DataGeometry& data, Device device);
std::shared_ptr<DiffusionModel> build_model(const TrainConfig& config, const DataGeometry& data, Device device);

// Block swapping (train.blocks_to_swap, engine/block_swap.h): the frozen weights of the last `n_blocks`
// of model.block_paths() move to host memory and are streamed to `device` around each block's run.
// n_blocks 0 detaches any swapper; more blocks than the model has, or a model without blocks, is a
// Config error. build_model calls it for train.blocks_to_swap > 0 (which needs gradient checkpointing).
std::shared_ptr<BlockSwapper> attach_block_swapper(DiffusionModel& model, int64_t n_blocks, Device device);

// Weight sharding (distributed.shard: weights, engine/block_swap.h "Sharded"): every block of
// model.block_paths() keeps only this rank's 1/N of its frozen weights, all-gathered over `group` (a group
// of its own, on `device`) as each block runs; the shards of the last `n_host_blocks` blocks stay in host memory
// (train.blocks_to_swap with sharding). Needs blocks; a Config error names what is missing. (build_model attaches
// no host swapper when config.distributed.shard_weights: the shards take its place.)
std::shared_ptr<BlockSwapper> attach_weight_shards(DiffusionModel& model, std::shared_ptr<comm::ProcessGroup> group,
                                                   Device device, int64_t n_host_blocks = 0);

// Writes `model` (a network.type full run's trained model) in config.save.dtype under `directory` as its
// architecture exports it (Architecture::export_model: the layout of its base weights, so it loads back as
// model.name_or_path), named config.name. Metadata: wick_network_type ("full"), wick_step, wick_config (the
// resolved YAML). Written through a temporary file and a rename; returns the file or folder written.
std::filesystem::path save_model_weights(const DiffusionModel& model, const TrainConfig& config,
                                         const std::filesystem::path& directory, int64_t step);

}  // namespace wick
