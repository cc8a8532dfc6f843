#include "memest/status.h"

#include <gtest/gtest.h>

namespace memest {
namespace {

TEST(StatusTest, OkAndErrorsCarryCodeAndContext) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = InvalidModel("truncated protobuf").WithContext("model.onnx");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kInvalidModel);
  EXPECT_EQ(s.message(), "model.onnx: truncated protobuf");
  EXPECT_EQ(s.ToString(), "invalid_model: model.onnx: truncated protobuf");
}

TEST(StatusTest, TheSubjectSaysWhatAFailureIsAboutAndSurvivesContext) {
  EXPECT_EQ(NotFound("x").subject(), Subject::kUnspecified);
  Status s = NotFound("model file 'm.onnx' not found").About(Subject::kModel).WithContext("job 3");
  EXPECT_EQ(s.subject(), Subject::kModel);
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_EQ(s.message(), "job 3: model file 'm.onnx' not found");
  EXPECT_TRUE(Status::Ok().About(Subject::kModel).ok());
}

TEST(StatusTest, ResultHoldsValueOrError) {
  Result<int> good(3);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 3);
  Result<int> bad(NotFound("x"));
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kNotFound);
  Result<int> ok_status_without_value(Status::Ok());
  EXPECT_EQ(ok_status_without_value.status().code(), ErrorCode::kInternal);
}

// Reading the value of an error Result aborts naming the status, in every build type (it used to
// read an empty std::optional).
TEST(StatusDeathTest, ValueOfAnErrorResultAbortsNamingTheStatus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Result<int> bad(NotFound("no such gpu 'x'"));
  EXPECT_DEATH((void)bad.value(),
               "value\\(\\) of an error Result \\(not_found: no such gpu 'x'\\)");
  Result<std::string> bad_string(Internal("boom"));
  EXPECT_DEATH((void)bad_string->size(), "internal: boom");
}

}  // namespace
}  // namespace memest
