/* memest/memest_c.h -- memest's stable C API, for schedulers in C, Go (cgo), Rust or anything
 * with a C FFI. Link with -lmemest (pkg-config memest, or find_package(memest) -> memest::memest).
 *
 * Contract:
 *  - ABI. MEMEST_C_ABI_VERSION changes only when a declaration here changes incompatibly;
 *    memest_c_abi_version() says what the library was built with. Handles are opaque.
 *  - Errors. Every function that can fail returns an int: MEMEST_C_OK (0) or one of the codes
 *    below (memest::ErrorCode + 1 values, plus MEMEST_C_BAD_HANDLE). The message of the calling
 *    thread's last failure is memest_c_last_error(); it stays valid until that thread's next call.
 *    A null, already freed or foreign handle is MEMEST_C_BAD_HANDLE, never a crash. No function
 *    throws or aborts.
 *  - Ownership. memest_*_load / memest_estimator_new / memest_estimate create handles the caller
 *    frees with the matching memest_*_free (freeing NULL is a no-op; freeing twice is
 *    MEMEST_C_BAD_HANDLE). Strings returned through char** are the caller's, freed with
 *    memest_c_string_free().
 *  - Threads. Models and estimators are immutable: one handle may be used from many threads at
 *    once (estimates of the same model in parallel are safe). Results are read-only too. Freeing a
 *    handle while another thread uses it is the caller's bug (reported as a bad handle if it is
 *    caught, undefined otherwise).
 *  - Options are JSON text with the keys of memest/json.h (the CLI's "options" object); NULL or
 *    "" means the defaults. Unknown keys are errors.
 */
#ifndef MEMEST_MEMEST_C_H_
#define MEMEST_MEMEST_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEMEST_C_ABI_VERSION 1

enum {
  MEMEST_C_OK = 0,
  MEMEST_C_INVALID_ARGUMENT = 2, /* bad option value */
  MEMEST_C_NOT_FOUND = 3,        /* file, GPU profile or backend does not exist */
  MEMEST_C_INVALID_MODEL = 4,    /* not a valid ONNX model */
  MEMEST_C_UNBOUND_DIM = 5,      /* a symbolic dim has no value */
  MEMEST_C_OVERFLOW = 6,
  MEMEST_C_UNSUPPORTED = 7,
  MEMEST_C_UNAVAILABLE = 8, /* backend not built */
  MEMEST_C_INTERNAL = 9,
  MEMEST_C_BAD_HANDLE = 100 /* a null, freed or foreign handle, or a null out-pointer */
};

typedef struct memest_model memest_model;
typedef struct memest_estimator memest_estimator;
typedef struct memest_result memest_result;

int memest_c_abi_version(void);
const char* memest_c_version(void); /* "0.1.0"; static storage */
/* The calling thread's last error message ("" when its last call succeeded). */
const char* memest_c_last_error(void);
void memest_c_string_free(char* s);

/* Models. */
int memest_model_load_file(const char* path, memest_model** out);
int memest_model_load_bytes(const void* data, size_t size, const char* name, memest_model** out);
int memest_model_free(memest_model* model);

/* Estimators: "analytical", "symbolic", "learned" (see memest --list-backends). */
int memest_estimator_new(const char* backend, memest_estimator** out);
int memest_estimator_free(memest_estimator* estimator);

/* One estimate of `model` under the options. */
int memest_estimate(const memest_estimator* estimator, const memest_model* model,
                    const char* options_json, memest_result** out);
int memest_result_free(memest_result* result);
/* Device-level peak in bytes (what nvidia-smi would show for the process). */
int memest_result_peak_device(const memest_result* result, uint64_t* out);
/* The estimate as JSON (memest/json.h EstimateToJson); free with memest_c_string_free. */
int memest_result_json(const memest_result* result, char** out);
/* Whether the estimate fits the GPU profile `gpu` (NULL: the options' GPU) under the options'
 * fit policy; headroom in bytes (negative: over by that much). */
int memest_result_fits(const memest_result* result, const char* gpu, int* fits, int64_t* headroom);

/* The largest batch that fits the options' GPU (0: not even 1); `evaluations` may be NULL. */
int memest_max_batch(const memest_estimator* estimator, const memest_model* model,
                     const char* options_json, int64_t* batch, int* evaluations);

/* Colocation (memest/pack.h): `count` jobs, each a model and its options JSON (NULL: defaults),
 * on GPU profile `gpu`; gpus == 0: whether they fit on one GPU together, gpus > 0: their
 * placement on that many GPUs; mps != 0: as MPS clients. The result is the memest.pack/1 JSON
 * (docs/embedding.md), freed with memest_c_string_free. */
int memest_pack(const memest_estimator* estimator, const memest_model* const* models,
                const char* const* options_json, size_t count, const char* gpu, int64_t gpus,
                int mps, char** result_json);

#ifdef __cplusplus
}
#endif

#endif /* MEMEST_MEMEST_C_H_ */
