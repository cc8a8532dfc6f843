// base/sha256: the FIPS 180-4 / NIST example vectors, one-shot and incremental.
#include "base/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace memest::base {
namespace {

TEST(Sha256Test, Fips180Vectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000, 'a')),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST(Sha256Test, IncrementalUpdatesEqualOneShot) {
  Sha256 h;  // one million 'a' in 1,000 pieces (NIST's long-message vector)
  for (int i = 0; i < 1000; ++i) h.Update(std::string(1000, 'a'));
  EXPECT_EQ(h.HexDigest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  Sha256 odd;  // pieces that straddle the 64-byte block boundary
  const std::string text(200, 'x');
  odd.Update(text.substr(0, 63));
  odd.Update(text.substr(63, 2));
  odd.Update(text.substr(65));
  EXPECT_EQ(odd.HexDigest(), Sha256Hex(text));
}

TEST(Sha256Test, MissingFileIsNotFound) {
  auto r = Sha256File("/nonexistent/model.onnx");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace memest::base
