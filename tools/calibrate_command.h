// tools/calibrate_command.h -- `memest calibrate ROWS.csv -o STACK.json`: fits a stack profile
// to measured jobs (memest/calibrate.h) and prints each job's residual and the held-out errors.
#ifndef MEMEST_TOOLS_CALIBRATE_COMMAND_H_
#define MEMEST_TOOLS_CALIBRATE_COMMAND_H_

namespace memest::cli {

// argv[0] is "calibrate". Exit codes: 0 written; 2 usage, unreadable rows or a refused fit (too
// few or inconsistent rows); 3 a model that cannot be loaded or estimated; 4 internal.
int RunCalibrate(int argc, char** argv);

}  // namespace memest::cli

#endif  // MEMEST_TOOLS_CALIBRATE_COMMAND_H_
