// Engine test entry point: registers the gradient-check table entries as tests, then runs GoogleTest.
#include <gtest/gtest.h>

#include "tests/engine/gradcheck.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  wick::testing::register_grad_tests();
  return RUN_ALL_TESTS();
}
