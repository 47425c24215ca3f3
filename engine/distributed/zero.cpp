// shard_optimizer: the ZeRO-1 partition and the all-gather of the masters after each update.
#include "engine/distributed/zero.h"

#include <memory>

#include "engine/checkpoint/optimizer_shards.h"
#include "runtime/error.h"
#include "runtime/ops/copy.h"

namespace wick {

void shard_optimizer(Optimizer& optimizer, comm::ProcessGroup& group) {
  if (group.size() == 1) return;
  WICK_CHECK(optimizer.flat_master().device() == group.device(), "shard_optimizer: the parameters are on ",
             optimizer.flat_master().device().str(), " but the ", group.backend(), " group works on ",
             group.device().str());
  const int64_t n = optimizer.flat_numel();
  std::vector<FlatRange> ranges = zero_partition(n, group.size());
  const FlatRange mine = ranges[static_cast<size_t>(group.rank())];
  // Every rank's slice padded to the same length, so one all-gather lays them out in flat order.
  const int64_t chunk = ranges.front().end - ranges.front().begin;
  auto send = std::make_shared<Tensor>(Tensor::empty({chunk}, DType::F32, group.device()));
  auto receive = std::make_shared<Tensor>(Tensor::empty({chunk * group.size()}, DType::F32, group.device()));
  copy_into(*send, Tensor::scalar(0.0));
  comm::ProcessGroup* g = &group;
  optimizer.shard_state(mine.begin, mine.end, [g, send, receive, n](const Tensor& flat, int64_t begin, int64_t end) {
    if (end > begin) copy_into(send->narrow(0, 0, end - begin), flat.narrow(0, begin, end - begin));
    g->all_gather(*send, *receive);
    copy_into(flat, receive->narrow(0, 0, n));
  });
}

}  // namespace wick
