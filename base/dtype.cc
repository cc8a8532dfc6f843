#include "base/dtype.h"

namespace memest::base {

uint64_t DTypeSize(int32_t dtype) {
  switch (dtype) {
    case kFloat:
    case kInt32:
    case kUInt32:
      return 4;
    case kUInt8:
    case kInt8:
    case kBool:
      return 1;
    case kUInt16:
    case kInt16:
    case kFloat16:
    case kBFloat16:
      return 2;
    case kInt64:
    case kDouble:
    case kUInt64:
    case kComplex64:
      return 8;
    case kComplex128:
      return 16;
    default:
      return 0;  // undefined, string, or unknown
  }
}

bool IsKnownDType(int32_t dtype) { return dtype >= kFloat && dtype <= kBFloat16; }

bool IsFloatDType(int32_t dtype) {
  return dtype == kFloat || dtype == kFloat16 || dtype == kDouble || dtype == kBFloat16;
}

std::string DTypeName(int32_t dtype) {
  switch (dtype) {
    case kFloat:
      return "float32";
    case kUInt8:
      return "uint8";
    case kInt8:
      return "int8";
    case kUInt16:
      return "uint16";
    case kInt16:
      return "int16";
    case kInt32:
      return "int32";
    case kInt64:
      return "int64";
    case kString:
      return "string";
    case kBool:
      return "bool";
    case kFloat16:
      return "float16";
    case kDouble:
      return "float64";
    case kUInt32:
      return "uint32";
    case kUInt64:
      return "uint64";
    case kComplex64:
      return "complex64";
    case kComplex128:
      return "complex128";
    case kBFloat16:
      return "bfloat16";
    default:
      return "dtype(" + std::to_string(dtype) + ")";
  }
}

}  // namespace memest::base
