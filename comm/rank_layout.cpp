#include "comm/rank_layout.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>

#include "runtime/error.h"
#include "runtime/tensor.h"

namespace wick::comm {
namespace {

// One rank's record in the all-gather: node, local rank, local size, device type (0 cpu, 1 cuda),
// device index, then the host name, one character per element, zero-padded.
constexpr int64_t kHostChars = 64;
constexpr int64_t kFields = 5;
constexpr int64_t kRecord = kFields + kHostChars;

// "0-3" for consecutive values, else "0 2 5".
std::string ranges(const std::vector<int>& values) {
  bool consecutive = true;
  for (size_t i = 1; i < values.size(); ++i) consecutive = consecutive && values[i] == values[i - 1] + 1;
  if (values.size() > 1 && consecutive) return std::to_string(values.front()) + "-" + std::to_string(values.back());
  std::string out;
  for (int v : values) {
    if (!out.empty()) out += ' ';
    out += std::to_string(v);
  }
  return out;
}

}  // namespace

int gpu_for_local_rank(int local_rank, int n_visible_gpus) {
  WICK_CHECK(local_rank >= 0, "gpu_for_local_rank: local rank ", local_rank, " < 0");
  WICK_CHECK_KIND(Runtime, n_visible_gpus > 0, "no CUDA device is visible to this rank (local rank ", local_rank,
                  ")");
  return local_rank % n_visible_gpus;
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "unknown";
  return name;
}

std::vector<RankPlace> gather_rank_places(ProcessGroup& group, Device device) {
  std::vector<int32_t> mine(kRecord, 0);
  mine[0] = group.node();
  mine[1] = group.local_rank();
  mine[2] = group.local_size();
  mine[3] = device.is_cuda() ? 1 : 0;
  mine[4] = device.index;
  const std::string host = host_name().substr(0, kHostChars - 1);
  for (size_t i = 0; i < host.size(); ++i) mine[kFields + i] = static_cast<unsigned char>(host[i]);
  Tensor input = Tensor::from_vector<int32_t>(mine, {kRecord}, group.device());
  Tensor output = Tensor::empty({kRecord * group.size()}, DType::I32, group.device());
  group.all_gather(input, output);
  const std::vector<int32_t> all = output.to_vector<int32_t>();
  std::vector<RankPlace> places(static_cast<size_t>(group.size()));
  for (int r = 0; r < group.size(); ++r) {
    const int32_t* record = all.data() + static_cast<int64_t>(r) * kRecord;
    RankPlace& p = places[static_cast<size_t>(r)];
    p.rank = r;
    p.node = record[0];
    p.local_rank = record[1];
    p.local_size = record[2];
    p.device = record[3] == 1 ? Device::cuda(record[4]) : Device::cpu();
    for (int64_t i = 0; i < kHostChars && record[kFields + i] != 0; ++i)
      p.host.push_back(static_cast<char>(record[kFields + i]));
  }
  return places;
}

std::string describe_rank_places(const std::vector<RankPlace>& places) {
  std::map<int, std::vector<const RankPlace*>> by_node;
  for (const RankPlace& p : places) by_node[p.node].push_back(&p);
  std::string out;
  for (const auto& [node, members] : by_node) {
    std::vector<int> ranks, local_ranks;
    std::vector<std::string> hosts;
    std::string devices;
    for (const RankPlace* p : members) {
      ranks.push_back(p->rank);
      local_ranks.push_back(p->local_rank);
      if (std::find(hosts.begin(), hosts.end(), p->host) == hosts.end()) hosts.push_back(p->host);
      if (!devices.empty()) devices += ' ';
      devices += p->device.str();
    }
    std::string host_names;
    for (const std::string& h : hosts) {
      if (!host_names.empty()) host_names += ", ";
      host_names += h;
    }
    if (!out.empty()) out += '\n';
    out += "node " + std::to_string(node) + " (" + host_names + "): ranks " + ranges(ranks) + ", local ranks " +
           ranges(local_ranks) + ", " + devices;
  }
  return out;
}

}  // namespace wick::comm
