#include "runtime/dtype.h"

#include "runtime/error.h"

namespace wick {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::I8: return "i8";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  struct Alias { const char* name; DType dtype; };
  static const Alias aliases[] = {
      {"f32", DType::F32},  {"float32", DType::F32}, {"fp32", DType::F32},   {"float", DType::F32},
      {"f64", DType::F64},  {"float64", DType::F64}, {"fp64", DType::F64},   {"double", DType::F64},
      {"bf16", DType::BF16}, {"bfloat16", DType::BF16}, {"f16", DType::F16}, {"fp16", DType::F16},
      {"float16", DType::F16}, {"half", DType::F16}, {"i32", DType::I32},    {"int32", DType::I32},
      {"i64", DType::I64},  {"int64", DType::I64},   {"u8", DType::U8},      {"uint8", DType::U8},
      {"i8", DType::I8},    {"int8", DType::I8},
  };
  for (const auto& alias : aliases)
    if (name == alias.name) return alias.dtype;
  WICK_FAIL(Config, "unknown dtype '", name, "': valid names are f32, f64, bf16, f16, i32, i64, u8, i8");
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  bool float_a = is_floating(a), float_b = is_floating(b);
  if (float_a && !float_b) return a;
  if (float_b && !float_a) return b;
  if (float_a && float_b) {
    if (a == DType::F64 || b == DType::F64) return DType::F64;
    return DType::F32;  // f32 with a 16-bit float, or bf16 with f16
  }
  // Both integral.
  if (a == DType::I64 || b == DType::I64) return DType::I64;
  if (a == DType::I32 || b == DType::I32) return DType::I32;
  return DType::I32;  // u8 with i8: neither holds the other
}

}  // namespace wick
