/* The engine's C API (libfact): what Python (python/fact/_engine.py, through ctypes) and agent
 * servers call in-process. JSON in, JSON out; no exception crosses it. The C++ API behind it is
 * fact/engine/engine.hpp.
 */
#ifndef FACT_ENGINE_C_API_H
#define FACT_ENGINE_C_API_H
#include "fact/runtime/fact_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs discovery, realization (and tuning, when asked) on a captured graph and writes the plan
 * (docs/plan.md) into request.out_dir. `request_json`:
 *   {"graph": "<graph.json path>", "out_dir": "<folder>",
 *    "precision": "strict"|"tf32"|"native"|"" (""/absent: from the graph's dtype),
 *    "compile": bool, "tune": N (0: no tuning; N: configurations per kernel, GPU only),
 *    "patterns": ["mlp", ...] | null, "tuning_db": "<path>"|null (null: the default database),
 *    "device_profile": "<path>"|null, "jobs": N (0: all cores), "progress": bool,
 *    "inputs": [...] (copied into the plan), "device": "cuda"|"cpu"}
 * On return *response_json (free with fact_engine_free) is
 *   {"status": "ok", "plan": "<out_dir>/plan.json", "summary": "..."} or
 *   {"status": "error", "error": "<one line>"}.
 * Returns 0 when a plan was written (it may say "unplanned", with the reason), 1 otherwise. */
int fact_engine_plan(const char* request_json, char** response_json);

/* Frees a string the engine returned. */
void fact_engine_free(char* text);

/* "FACT_OK", "FACT_ERR_CANNOT_IMPLEMENT", ...: the one table of FactStatus names
 * ("FACT_STATUS_<n>" for a value it does not know). */
const char* fact_status_name(int status);

/* "<version> <git sha>" of the engine library. */
const char* fact_engine_version(void);

/* The host (CPU, float64) reference of any registered kind: computes what a kernel computes for
 * the same argument image, reading and writing host memory. FACT_OK, or FACT_ERR_INVALID_ARGS
 * for an unknown kind, a wrong ABI version/size or malformed arguments. */
int fact_reference_call(const FactCallHeader* args);

#ifdef __cplusplus
}
#endif
#endif /* FACT_ENGINE_C_API_H */
