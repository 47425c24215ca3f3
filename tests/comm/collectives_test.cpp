// Collectives of the process group this program was started with: under
// `mpirun --oversubscribe -np N` the MPI group (N = 2, 4 in ctest), without a launcher the single
// group (and then MPI must stay uninitialized). Inputs are small integers, so every sum is exact in
// every dtype (bf16 holds integers up to 256 exactly) and results are compared for equality.
// reduce_scatter_v runs with odd counts, zero counts (some ranks, and all), large counts, in place
// and into a separate output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "comm/launch_env.h"
#include "comm/mpi_group.h"
#include "comm/single_group.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "tests/comm/test_group.h"

using namespace wick;
using ::testing::HasSubstr;

std::shared_ptr<comm::ProcessGroup> g_group;

namespace {

const std::vector<DType> all_dtypes = {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64};
const std::vector<int64_t> sizes = {1, 7, 1000003};

double pattern(int64_t i, int rank) { return static_cast<double>(i % 13 + rank); }

Tensor make(int64_t n, DType dtype, int rank) {
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = pattern(i, rank);
  return Tensor::from_vector(values, {n}).to(dtype);
}

Tensor filled(int64_t n, DType dtype, double value) {
  return Tensor::from_vector(std::vector<double>(static_cast<size_t>(n), value), {n}).to(dtype);
}

// Counts mismatches (printing the first) so a million-element failure stays readable.
template <typename Expected>
void expect_values(const Tensor& t, Expected expected, const std::string& what) {
  std::vector<double> got = t.to_vector<double>();
  int64_t n_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double want = expected(static_cast<int64_t>(i));
    if (got[i] != want) {
      if (n_bad == 0) ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want;
      ++n_bad;
    }
  }
  EXPECT_EQ(n_bad, 0) << what << ": " << n_bad << " of " << got.size() << " elements wrong";
}

std::string label(const char* op, DType t, int64_t n) {
  return std::string(op) + " " + dtype_name(t) + " n=" + std::to_string(n) + " on " + g_group->describe();
}

}  // namespace

TEST(Collectives, GroupIsWhatTheLauncherStarted) {
  comm::LaunchEnv env = comm::detect_launch_env();
  EXPECT_EQ(g_group->size(), env.launched ? env.world_size : 1);
  EXPECT_EQ(g_group->rank(), env.launched ? env.rank : 0);
  EXPECT_EQ(g_group->backend(), g_group->size() > 1 ? "mpi" : "single");
  EXPECT_GE(g_group->local_rank(), 0);
  EXPECT_LT(g_group->local_rank(), g_group->local_size());
  EXPECT_LE(g_group->local_size(), g_group->size());
  std::printf("[ info ] %s, launcher %s, local rank %d of %d\n", g_group->describe().c_str(), env.launcher.c_str(),
              g_group->local_rank(), g_group->local_size());
}

TEST(Collectives, AllReduceSumAndMax) {
  int p = g_group->size(), r = g_group->rank();
  for (DType t : all_dtypes)
    for (int64_t n : sizes) {
      Tensor x = make(n, t, r);
      g_group->all_reduce(x);
      expect_values(x, [&](int64_t i) { return p * static_cast<double>(i % 13) + p * (p - 1) / 2.0; },
                    label("all_reduce sum", t, n));
      Tensor y = make(n, t, r);
      g_group->all_reduce(y, comm::ReduceOp::Max);
      expect_values(y, [&](int64_t i) { return pattern(i, p - 1); }, label("all_reduce max", t, n));
    }
}

TEST(Collectives, ReduceScatter) {
  int p = g_group->size(), r = g_group->rank();
  for (DType t : all_dtypes)
    for (int64_t n : sizes) {
      Tensor input = make(n * p, t, r);
      Tensor output = filled(n, t, -1);
      g_group->reduce_scatter(input, output);
      expect_values(output, [&](int64_t i) { return p * static_cast<double>((r * n + i) % 13) + p * (p - 1) / 2.0; },
                    label("reduce_scatter", t, n));
    }
}

// Count sets for reduce_scatter_v on p ranks: odd counts, zeros (rank 0 and every other rank),
// every count zero, and a large one.
std::vector<std::pair<std::string, std::vector<int64_t>>> count_sets(int p) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> sets = {
      {"odd", {}}, {"zeros", {}}, {"all zero", {}}, {"large", {}}};
  for (int r = 0; r < p; ++r) {
    sets[0].second.push_back(2 * r + 3);
    sets[1].second.push_back(r % 2 == 0 ? 0 : 7 + r);
    sets[2].second.push_back(0);
    sets[3].second.push_back(300007 + r);
  }
  return sets;
}

TEST(Collectives, ReduceScatterVariableCounts) {
  int p = g_group->size(), r = g_group->rank();
  for (DType t : {DType::F32, DType::BF16, DType::F64, DType::I64})
    for (const auto& [name, counts] : count_sets(p))
      for (bool in_place : {false, true}) {
        int64_t total = 0, offset = 0;
        for (int q = 0; q < p; ++q) {
          if (q < r) offset += counts[static_cast<size_t>(q)];
          total += counts[static_cast<size_t>(q)];
        }
        const int64_t mine = counts[static_cast<size_t>(r)];
        Tensor input = make(total, t, r);
        Tensor output = in_place ? input.narrow(0, offset, mine) : filled(mine, t, -1);
        g_group->reduce_scatter_v(input, output, counts);
        std::string what = label("reduce_scatter_v", t, total) + " counts " + name + (in_place ? " in place" : "");
        // Segment r of every rank's input, summed: element offset + i of input is i % 13 + rank there.
        expect_values(output, [&](int64_t i) { return p * static_cast<double>((offset + i) % 13) + p * (p - 1) / 2.0; },
                      what);
        if (in_place)  // the other segments keep this rank's input
          expect_values(input, [&](int64_t j) {
            bool own = j >= offset && j < offset + mine;
            return own ? p * static_cast<double>(j % 13) + p * (p - 1) / 2.0 : pattern(j, r);
          }, what + " (whole input)");
      }
}

TEST(Collectives, AllGather) {
  int p = g_group->size(), r = g_group->rank();
  for (DType t : all_dtypes)
    for (int64_t n : sizes) {
      Tensor input = make(n, t, r);
      Tensor output = filled(n * p, t, -1);
      g_group->all_gather(input, output);
      expect_values(output, [&](int64_t j) { return pattern(j % n, static_cast<int>(j / n)); },
                    label("all_gather", t, n));
    }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  int p = g_group->size(), r = g_group->rank();
  for (DType t : all_dtypes)
    for (int64_t n : sizes)
      for (int root = 0; root < p; root += (n > 7 ? p - 1 : 1)) {
        Tensor x = r == root ? make(n, t, 100 + root) : filled(n, t, -1);
        g_group->broadcast(x, root);
        expect_values(x, [&](int64_t i) { return pattern(i, 100 + root); },
                      label("broadcast", t, n) + " root " + std::to_string(root));
        if (n > 7 && p == 1) break;
      }
}

TEST(Collectives, BarrierCompletes) {
  for (int i = 0; i < 5; ++i) g_group->barrier();
  auto work = g_group->barrier_async();
  work->wait();
  EXPECT_TRUE(work->is_completed());
}

// Several requests in flight at once, waited for out of order (the gradient-bucket pattern).
TEST(Collectives, AsyncRequestsOverlap) {
  int p = g_group->size(), r = g_group->rank();
  std::vector<Tensor> reduced, shards, gathered, segments;
  std::vector<std::shared_ptr<comm::Work>> works;
  std::vector<int64_t> counts;
  for (int q = 0; q < p; ++q) counts.push_back(q + 1);
  for (DType t : all_dtypes) {
    reduced.push_back(make(1000, t, r));
    works.push_back(g_group->all_reduce_async(reduced.back()));
    Tensor input = make(7 * p, t, r);
    shards.push_back(filled(7, t, -1));
    works.push_back(g_group->reduce_scatter_async(input, shards.back()));
    gathered.push_back(filled(7 * p, t, -1));
    works.push_back(g_group->all_gather_async(make(7, t, r), gathered.back()));
    Tensor whole = make(p * (p + 1) / 2, t, r);  // segment q: q + 1 elements from q (q + 1) / 2
    segments.push_back(whole.narrow(0, r * (r + 1) / 2, r + 1));
    works.push_back(g_group->reduce_scatter_v_async(whole, segments.back(), counts));
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (auto& w : works) EXPECT_TRUE(w->is_completed());
  for (size_t k = 0; k < all_dtypes.size(); ++k) {
    DType t = all_dtypes[k];
    expect_values(reduced[k], [&](int64_t i) { return p * static_cast<double>(i % 13) + p * (p - 1) / 2.0; },
                  label("async all_reduce", t, 1000));
    expect_values(shards[k], [&](int64_t i) { return p * static_cast<double>((r * 7 + i) % 13) + p * (p - 1) / 2.0; },
                  label("async reduce_scatter", t, 7));
    expect_values(gathered[k], [&](int64_t j) { return pattern(j % 7, static_cast<int>(j / 7)); },
                  label("async all_gather", t, 7));
    expect_values(segments[k],
                  [&](int64_t i) { return p * static_cast<double>((r * (r + 1) / 2 + i) % 13) + p * (p - 1) / 2.0; },
                  label("async reduce_scatter_v in place", t, r + 1));
  }
}

TEST(Collectives, BadArgumentsThrowNamingTheOp) {
  int p = g_group->size();
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Tensor out = Tensor::empty({3}, DType::F32);
  EXPECT_THAT(message([&] { g_group->reduce_scatter(Tensor::empty({3 * p + 1}, DType::F32), out); }),
              HasSubstr("reduce_scatter"));
  EXPECT_THAT(message([&] { g_group->all_gather(out, Tensor::empty({3 * p}, DType::F64)); }), HasSubstr("all_gather"));
  EXPECT_THAT(message([&] { g_group->all_reduce(Tensor::empty({4, 3}, DType::F32).transpose(0, 1)); }),
              HasSubstr("not contiguous"));
  EXPECT_THAT(message([&] { g_group->all_reduce(Tensor::empty({4}, DType::U8)); }), HasSubstr("u8"));
  EXPECT_THAT(message([&] { g_group->broadcast(out, p); }), HasSubstr("root"));
  std::vector<int64_t> threes(static_cast<size_t>(p), 3);
  Tensor input = Tensor::empty({3 * p}, DType::F32);
  std::vector<int64_t> too_many(static_cast<size_t>(p + 1), 3);
  EXPECT_THAT(message([&] { g_group->reduce_scatter_v(input, out, too_many); }), HasSubstr("counts for a group of"));
  EXPECT_THAT(message([&] { g_group->reduce_scatter_v(Tensor::empty({3 * p + 1}, DType::F32), out, threes); }),
              HasSubstr("sum(counts)"));
  EXPECT_THAT(message([&] { g_group->reduce_scatter_v(input, Tensor::empty({2}, DType::F32), threes); }),
              HasSubstr("counts["));
  std::vector<int64_t> negative = threes;
  negative.back() = -1;
  EXPECT_THAT(message([&] { g_group->reduce_scatter_v(input, out, negative); }),
              HasSubstr("negative"));
  // Overlapping input, but not this rank's own segment.
  Tensor wide = Tensor::empty({3 * p + 1}, DType::F32);
  EXPECT_THAT(message([&] {
                g_group->reduce_scatter_v(wide.narrow(0, 0, 3 * p), wide.narrow(0, 3 * g_group->rank() + 1, 3), threes);
              }),
              HasSubstr("overlaps"));
  g_group->barrier();  // every rank threw before communicating; still in step
}

TEST(LaunchEnv, UnknownBackendListsTheValidOnes) {
  try {
    comm::make_process_group("gloo", Device::cpu(), 10);
    FAIL() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr("auto, nccl, mpi, none"));
  }
  EXPECT_THROW(comm::make_process_group("nccl", Device::cpu(), 10), WickError);
}

// Without a launcher: world size 1 whatever the backend, and MPI is never initialized.
TEST(LaunchEnv, NoLauncherNeverInitializesMpi) {
  if (comm::detect_launch_env().launched) GTEST_SKIP() << "started by a launcher; ctest's mpi.single covers this";
  EXPECT_FALSE(comm::mpi_initialized());
  for (const char* backend : {"auto", "mpi", "none"}) {
    auto group = comm::make_process_group(backend, Device::cpu(), 10);
    EXPECT_EQ(group->size(), 1) << backend;
    EXPECT_EQ(group->backend(), "single") << backend;
  }
  EXPECT_FALSE(comm::mpi_initialized()) << "make_process_group initialized MPI without a launcher";
}

TEST(LaunchEnv, SingleGroupOnCudaSkipsWithoutGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the single group on CUDA is not tested here";
  comm::SingleGroup group(Device::cuda(0));
  Tensor input = make(7, DType::F32, 0).to(Device::cuda(0));
  Tensor output = Tensor::empty({7}, DType::F32, Device::cuda(0));
  group.all_gather(input, output);
  expect_values(output, [](int64_t i) { return pattern(i, 0); }, "cuda single all_gather");
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    g_group = comm::make_process_group("auto", Device::cpu(), /*timeout_s=*/120);
  } catch (const WickError& e) {
    std::fprintf(stderr, "collectives_test: %s\n", e.what());
    return 1;
  }
  int status = RUN_ALL_TESTS();
  // Agree on the outcome, so mpirun's status reflects a failure on any rank.
  Tensor failed = Tensor::scalar(status != 0 ? 1 : 0, DType::I32).reshape({1});
  g_group->all_reduce(failed, comm::ReduceOp::Max);
  if (g_group->rank() == 0 && failed.item() != 0 && status == 0)
    std::fprintf(stderr, "collectives_test: a test failed on another rank\n");
  g_group.reset();
  return failed.item() != 0 ? 1 : 0;
}
