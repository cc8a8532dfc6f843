// analytical/analytical.h -- the closed-form backend (formula at the top of analytical.cc).
#ifndef MEMEST_ANALYTICAL_ANALYTICAL_H_
#define MEMEST_ANALYTICAL_ANALYTICAL_H_

#include <memory>

#include "memest/estimator.h"

namespace memest::analytical {

std::unique_ptr<Estimator> MakeAnalyticalEstimator();

}  // namespace memest::analytical

#endif  // MEMEST_ANALYTICAL_ANALYTICAL_H_
