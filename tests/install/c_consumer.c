/* The C API from an installed memest, compiled as C: load a model from a file, estimate it at
 * batch 32, check the fit, search the largest batch, print the JSON's first characters. */
#include <stdio.h>
#include <string.h>

#include "memest/memest_c.h"

int main(int argc, char** argv) {
  memest_model* model = NULL;
  memest_estimator* estimator = NULL;
  memest_result* result = NULL;
  uint64_t peak = 0;
  int fits = 0;
  int64_t headroom = 0, batch = 0;
  char* json = NULL;
  if (argc != 2 || memest_c_abi_version() != MEMEST_C_ABI_VERSION) return 2;
  if (memest_model_load_file(argv[1], &model) != MEMEST_C_OK ||
      memest_estimator_new("analytical", &estimator) != MEMEST_C_OK ||
      memest_estimate(estimator, model, "{\"batch\": 32}", &result) != MEMEST_C_OK ||
      memest_result_peak_device(result, &peak) != MEMEST_C_OK ||
      memest_result_fits(result, NULL, &fits, &headroom) != MEMEST_C_OK ||
      memest_result_json(result, &json) != MEMEST_C_OK ||
      memest_max_batch(estimator, model, "{\"gpu\": \"a100-40gb\"}", &batch, NULL) != MEMEST_C_OK) {
    fprintf(stderr, "error: %s\n", memest_c_last_error());
    return 3;
  }
  {
    const char* head = "{\"backend\":\"analytical\"";
    if (strncmp(json, head, strlen(head)) != 0) return 6;
  }
  printf("memest %s (C ABI %d): peak %llu bytes, fits %d, max batch %lld, json %.20s\n",
         memest_c_version(), memest_c_abi_version(), (unsigned long long)peak, fits,
         (long long)batch, json);
  /* A freed handle is an error, not a crash. */
  memest_result_free(result);
  if (memest_result_free(result) != MEMEST_C_BAD_HANDLE) return 4;
  memest_c_string_free(json);
  memest_estimator_free(estimator);
  memest_model_free(model);
  return peak > 0 && batch > 0 ? 0 : 5;
}
