// base/sha256.h -- SHA-256 (FIPS 180-4) for model provenance, generated-model and row ids.
// Self-contained: no crypto library is linked. Pure functions, thread-safe.
#ifndef MEMEST_BASE_SHA256_H_
#define MEMEST_BASE_SHA256_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "memest/status.h"

namespace memest::base {

// Incremental hasher: Update() any number of times, then HexDigest() once.
class Sha256 {
 public:
  Sha256();
  void Update(std::string_view data);
  std::string HexDigest();  // 64 lower-case hex digits; the object is spent afterwards

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  uint64_t len_ = 0;  // bytes hashed so far
  size_t used_ = 0;   // bytes in buf_
};

std::string Sha256Hex(std::string_view data);
// Hash of a file's bytes. NotFound when it cannot be opened.
Result<std::string> Sha256File(const std::string& path);

}  // namespace memest::base

#endif  // MEMEST_BASE_SHA256_H_
