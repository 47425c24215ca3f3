// Where the committed test fixtures live: $WICK_TEST_DATA_DIR when set (a copied test bundle on a
// GPU machine), else the source tree's tests/data (baked in at configure time).
#pragma once

#include <cstdlib>
#include <string>

namespace wick::testing {

inline std::string test_data_dir() {
  if (const char* dir = std::getenv("WICK_TEST_DATA_DIR")) return dir;
  return WICK_TEST_DATA_DIR;
}

}  // namespace wick::testing
