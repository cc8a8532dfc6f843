/* A fault shim for MeasureToolTest.AChildKilledBySignalLeavesItsStderrInTheRow: preloaded
 * (LD_PRELOAD) into memest-measure with MEMEST_TEST_ABORT_CHILD set, it makes every process that
 * is not the sweep itself (the isolated child of one configuration) write what an uncaught C++
 * exception writes and die by SIGABRT before main -- the way the harness's children died on a
 * GPU, so the test sees what the row keeps of such a death. Without the variable it does nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void AbortIfMeasureChild(void) {
  if (getenv("MEMEST_TEST_ABORT_CHILD") == NULL) return;
  char cmdline[8192];
  FILE* f = fopen("/proc/self/cmdline", "rb");
  if (f == NULL) return;
  size_t n = fread(cmdline, 1, sizeof cmdline - 1, f);
  fclose(f);
  for (size_t i = 0; i < n; ++i) {
    if (cmdline[i] == '\0') cmdline[i] = ' ';
  }
  cmdline[n] = '\0';
  if (strstr(cmdline, "--sweep") != NULL) return; /* the parent runs on */
  fputs("terminate called after throwing an instance of 'c10::Error'\n  what():  shim abort\n",
        stderr);
  abort();
}
