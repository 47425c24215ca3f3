// ZeRO-1 over a process group: each rank keeps the optimizer state of one block-aligned slice of
// the flat buffers (zero_partition, engine/checkpoint/optimizer_shards.h), reads only that slice of
// the gradient (GradientBuckets reduce-scatters the gradient into it), updates only that slice of
// the masters, and an all-gather makes the masters whole again before they are written into the
// parameters. The clipping norm's partial sums (one per 256-element row) are all-gathered too, so
// every rank clips with the global norm, bitwise the unsharded one.
//
//   auto optimizer = make_optimizer("adamw8bit", model.trainable_parameters(), config);
//   shard_optimizer(*optimizer, *group);                     // before the first step and the buckets
//   GradientBuckets buckets(*optimizer, *group, 25 << 20);   // now reduce-scatters
//   ... buckets.finish(store); optimizer->step_reduced(lr);  // update own slice, all-gather masters
//   save_optimizer_shard(dir + "/" + optimizer_shard_file_name(rank, n),
//                        local_optimizer_shard(*optimizer, rank, n));
//
// docs/distributed.md ("ZeRO-1") describes the partition and the memory it saves.
#pragma once

#include "comm/process_group.h"
#include "engine/optim/optimizer.h"

namespace wick {

// Shards `optimizer`'s state over `group`. A no-op for the single-process group; a communicator of
// one rank (NCCL forced on one GPU) shards too, into one range, so the gathers run through it. The
// group's device must be the parameters' device.
void shard_optimizer(Optimizer& optimizer, comm::ProcessGroup& group);

}  // namespace wick
