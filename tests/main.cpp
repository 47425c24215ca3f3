// Test entry point: registers the op harness's table entries as tests, then runs GoogleTest.
#include <gtest/gtest.h>

namespace wick::testing {
void register_op_tests();
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  wick::testing::register_op_tests();
  return RUN_ALL_TESTS();
}
