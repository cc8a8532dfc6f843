// The test binary's main: GoogleTest, with the LibTorch measurement backend registered when it is
// built (memest/estimator.h, RegisterMeasurementFactory) -- before parameterized suites such as
// the contract battery enumerate ListBackends().
#include <gtest/gtest.h>

#ifdef MEMEST_HAVE_MEASUREMENT
#include "measurement/measurement.h"
#endif

int main(int argc, char** argv) {
#ifdef MEMEST_HAVE_MEASUREMENT
  memest::measurement::RegisterMeasurementBackend();
#endif
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
