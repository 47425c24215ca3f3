#include "models/weights/config_shapes.h"

#include <set>

#include "runtime/error.h"

namespace wick {

const Shape& required_shape(const std::map<std::string, Shape>& shapes, const std::string& name, size_t rank,
                            const std::string& what, const std::string& who, const std::string& hint) {
  auto it = shapes.find(name);
  WICK_CHECK_KIND(Data, it != shapes.end(), who, ": tensor '", name, "' is missing (it gives ", what, ")", hint);
  WICK_CHECK_KIND(Data, it->second.size() == rank && numel(it->second) > 0, who, ": tensor '", name, "' has shape ",
                  it->second, ", expected a non-empty ", rank, "-d tensor (it gives ", what, ")");
  return it->second;
}

int64_t contiguous_blocks(const std::map<std::string, Shape>& shapes, const std::string& prefix,
                          const std::string& who) {
  std::set<int64_t> indices;
  for (const auto& [name, shape] : shapes) {
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t dot = name.find('.', prefix.size());
    const std::string digits =
        name.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
    const bool numeric =
        !digits.empty() && digits.size() < 6 && digits.find_first_not_of("0123456789") == std::string::npos;
    WICK_CHECK_KIND(Data, numeric && dot != std::string::npos, who, ": tensor '", name, "' is not named ", prefix,
                    "<index>.<parameter>");
    indices.insert(std::stoll(digits));
  }
  const auto n = static_cast<int64_t>(indices.size());
  WICK_CHECK_KIND(Data, indices.empty() || *indices.rbegin() == n - 1, who, ": ", prefix, "N indices are not 0..",
                  n - 1, " (the largest is ", indices.empty() ? 0 : *indices.rbegin(), "): a block is missing");
  return n;
}

}  // namespace wick
