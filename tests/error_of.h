// The message of the WickError a call throws, for asserting what an error says:
//
//   EXPECT_THAT(error_of([] { matmul(a, b); }), HasSubstr("matmul"));
//
// A call that throws nothing is a test failure (and gives "(no error thrown)").
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "runtime/error.h"

namespace wick::testing {

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const WickError& error) {
    return error.what();
  }
  ADD_FAILURE() << "no WickError thrown";
  return "(no error thrown)";
}

}  // namespace wick::testing
