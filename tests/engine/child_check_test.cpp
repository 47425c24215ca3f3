// run_in_child (engine/data/child_check.h): each way a child can end is reported as such, and the
// parent survives all of them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <vector>

#include "engine/data/child_check.h"

namespace wick {
namespace {

using Outcome = ChildCheckResult::Outcome;

TEST(ChildCheck, EachEndOfTheChildIsReported) {
  const ChildCheckLimits limits{.timeout_seconds = 20, .extra_address_space_bytes = int64_t{256} << 20};
  EXPECT_EQ(run_in_child([] {}, limits).outcome, Outcome::Passed);

  ChildCheckResult threw = run_in_child([] { WICK_FAIL(Data, "x.h5: missing dataset /captions"); }, limits);
  EXPECT_EQ(threw.outcome, Outcome::Threw);
  EXPECT_EQ(threw.error_kind, ErrorKind::Data);
  EXPECT_EQ(threw.message, "x.h5: missing dataset /captions");  // without the child's [file:line]

  ChildCheckResult crashed = run_in_child([] { ::raise(SIGSEGV); }, limits);
  EXPECT_EQ(crashed.outcome, Outcome::Signaled);
  EXPECT_EQ(signal_name(crashed.signal_number), "SIGSEGV");

  // 1 GiB is over the child's allowance of 256 MiB above the parent's address space.
  ChildCheckResult out_of_memory = run_in_child(
      [] {
        std::vector<char> big(size_t{1} << 30, 1);
        EXPECT_EQ(big[12345], 1);  // not reached
      },
      limits);
  EXPECT_EQ(out_of_memory.outcome, Outcome::OutOfMemory);

  ChildCheckResult exited = run_in_child([] { ::_exit(7); }, limits);
  EXPECT_EQ(exited.outcome, Outcome::Failed);
  EXPECT_THAT(exited.message, ::testing::HasSubstr("exited with status 7 without reporting"));
}

TEST(ChildCheck, AHangIsKilledAtTheTimeLimit) {
  ChildCheckResult hung = run_in_child([] { for (;;) ::pause(); }, {.timeout_seconds = 0.5});
  EXPECT_EQ(hung.outcome, Outcome::TimedOut);
  EXPECT_GE(hung.seconds, 0.5);
  EXPECT_LT(hung.seconds, 10.0);
}

}  // namespace
}  // namespace wick
