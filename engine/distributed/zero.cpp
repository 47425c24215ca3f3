// shard_optimizer: the ZeRO-1 partition, and the all-gather over the ranks' ranges that makes the
// masters whole after each update and collects the clipping norm's partial sums.
#include "engine/distributed/zero.h"

#include <map>
#include <memory>

#include "engine/checkpoint/optimizer_shards.h"
#include "runtime/error.h"
#include "runtime/ops/copy.h"

namespace wick {

void shard_optimizer(Optimizer& optimizer, comm::ProcessGroup& group) {
  if (group.backend() == "single") return;  // nothing to share: the whole state stays here
  WICK_CHECK(optimizer.flat_master().device() == group.device(), "shard_optimizer: the parameters are on ",
             optimizer.flat_master().device().str(), " but the ", group.backend(), " group works on ",
             group.device().str());
  const int64_t n = optimizer.flat_numel();
  std::vector<FlatRange> ranges = zero_partition(n, group.size());
  const FlatRange mine = ranges[static_cast<size_t>(group.rank())];
  // Every rank's range padded to the first (longest) one's length, so one all-gather lays them out in
  // flat order: only the last non-empty range can be short, and every range after it is empty.
  const int64_t chunk = ranges.front().end - ranges.front().begin;
  // Send and receive buffers per granule (1: the masters; 256: the norm's row sums), made on first
  // use and reused at every step; a send buffer's padding stays zero.
  struct Buffers {
    Tensor send, receive;
  };
  auto buffers = std::make_shared<std::map<int64_t, Buffers>>();
  comm::ProcessGroup* g = &group;
  optimizer.shard_state(mine.begin, mine.end, [g, buffers, chunk, n](const Tensor& own, int64_t granule) {
    WICK_CHECK(granule > 0 && chunk % granule == 0 && n % granule == 0 && own.numel() <= chunk / granule,
               "shard_optimizer: cannot gather ", own.numel(), " values at granule ", granule, " for ranges of ",
               chunk, " elements");
    Buffers& b = (*buffers)[granule];
    if (!b.send.defined()) {
      b.send = Tensor::empty({chunk / granule}, DType::F32, g->device());
      copy_into(b.send, Tensor::scalar(0.0));
      b.receive = Tensor::empty({chunk / granule * g->size()}, DType::F32, g->device());
    }
    if (own.numel() > 0) copy_into(b.send.narrow(0, 0, own.numel()), own);
    g->all_gather(b.send, b.receive);
    return b.receive.narrow(0, 0, n / granule);
  });
}

}  // namespace wick
