// base/dtype.h -- ONNX element types (TensorProto.DataType numbering).
#ifndef MEMEST_BASE_DTYPE_H_
#define MEMEST_BASE_DTYPE_H_

#include <cstdint>
#include <string>

namespace memest::base {

// Values are onnx::TensorProto_DataType.
enum DType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
};

// Bytes per element; 0 for undefined/string/unknown codes.
uint64_t DTypeSize(int32_t dtype);
// True for codes this memest understands (1..16).
bool IsKnownDType(int32_t dtype);
bool IsFloatDType(int32_t dtype);  // float16/32/64, bfloat16
// "float32", "int64", ...; "dtype(N)" for unknown codes.
std::string DTypeName(int32_t dtype);

}  // namespace memest::base

#endif  // MEMEST_BASE_DTYPE_H_
