// What an architecture's config_from_shapes reads first (flux_config.h, flux2_config.h): a tensor that must be
// there with a given rank, and the count of numbered blocks. Each is refused with a WickError (Data) naming the
// tensor, after `who` ("Flux config").
//
//   const Shape& img_in = required_shape(shapes, "img_in.weight", 2, "hidden_size", "Flux config", hint);
//   int64_t depth = contiguous_blocks(shapes, "double_blocks.", "Flux config");   // indices 0 .. depth - 1
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "runtime/shape.h"

namespace wick {

// The shape of `name`, a non-empty `rank`-d tensor; else "<who>: tensor '<name>' is missing (it gives <what>)<hint>"
// or "... has shape [..], expected a non-empty <rank>-d tensor (it gives <what>)".
const Shape& required_shape(const std::map<std::string, Shape>& shapes, const std::string& name, size_t rank,
                            const std::string& what, const std::string& who, const std::string& hint = "");

// The number n of blocks "<prefix>N." among the names, every index 0 .. n - 1 present (0 when none); a name under
// the prefix that is not "<prefix><index>.<parameter>", or a missing index ("a block is missing"), is refused.
int64_t contiguous_blocks(const std::map<std::string, Shape>& shapes, const std::string& prefix, const std::string& who);

}  // namespace wick
