// memest/memest.h -- umbrella header for the memest library.
#ifndef MEMEST_MEMEST_H_
#define MEMEST_MEMEST_H_

#include "memest/calibrate.h"
#include "memest/coverage.h"
#include "memest/estimate.h"
#include "memest/estimator.h"
#include "memest/gpu_profile.h"
#include "memest/json.h"
#include "memest/model.h"
#include "memest/options.h"
#include "memest/measured_row.h"
#include "memest/pack.h"
#include "memest/serving.h"
#include "memest/stack.h"
#include "memest/timeline.h"
#include "memest/status.h"

#endif  // MEMEST_MEMEST_H_
