/* The engine's C API (libfact): what Python (python/fact/_engine.py, through ctypes) and agent
 * servers call in-process. JSON in, JSON out; no exception crosses it. The C++ API behind it is
 * fact/engine/engine.hpp.
 */
#ifndef FACT_ENGINE_C_API_H
#define FACT_ENGINE_C_API_H
#include "fact/core/fact_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs discovery, realization (and tuning, when asked) on a captured graph and writes the plan
 * (docs/plan.md) into request.out_dir. `request_json`:
 *   {"graph": "<graph.json path>" or "graph_json": "<the graph JSON text itself>", "out_dir": "<folder>",
 *    "precision": "strict"|"tf32"|"native"|"" (""/absent: from the graph's dtype),
 *    "compile": bool, "tune": N (0: no tuning; N: configurations per kernel, GPU only),
 *    "patterns": ["<rule or pattern folder>", ...] | null, "tuning_db": "<path>"|null (null: the default database),
 *    "device_profile": "<path>"|null, "jobs": N (0: all cores), "progress": bool,
 *    "inputs": [...] (copied into the plan), "device": "cuda"|"cpu",
 *    "use_registry": bool (default true), "registry_dir": "<path>"|null (the pattern registry:
 *    its verified kernels realize the matches they cover on the device's arch)}
 * On return *response_json (free with fact_engine_free) is
 *   {"status": "ok", "plan": "<out_dir>/plan.json", "summary": "..."} or
 *   {"status": "error", "error": "<one line>"}.
 * Returns 0 when a plan was written (it may say "unplanned", with the reason), 1 otherwise. */
int fact_engine_plan(const char* request_json, char** response_json);

/* The agent API (fact/engine/agent.hpp, docs/agent.md): JSON in, JSON out, like
 * fact_engine_plan. Each returns 0 when *response_json holds {"status": ...} with the result,
 * 1 when it holds {"status": "error", "error": "<one line>"}.
 *
 * fact_engine_discover: {"graph", "precision", "device_profile", "tuning_db", "registry_dir",
 *   "use_registry", "arch": "sm_90a"|"host"} -> discovery (fact.discovery/1 with "table" and
 *   "registry").
 * fact_engine_agent_task: the same plus "match" (a discovery label "3" or a rule / pattern name)
 *   -> the task (fact.agent.task/1: match, semantics, the subgraph call, ABI, registry entries);
 *   or {"fragment", "rule", "dtype", "precision"} -> {"semantics", "call"} for a fragment alone.
 * fact_engine_build: {"source", "device": "host"|"cuda", "kind", "name", "file_name",
 *   "timeout_seconds"} -> build result with "diagnostics" [{file, line, column, severity,
 *   message}].
 * fact_engine_realize: {"problem", "precision", "space", "config"|"params", "compile",
 *   "out_dir"} -> a kernel from a built-in template.
 * fact_engine_device: {"device_profile"} -> {"gpu_unavailable": reason|null, "profile": {...},
 *   "compile_unavailable": reason|null}.
 * fact_registry: {"op": "list"|"show"|"add"|"remove"|"export"|"lookup", "dir", "id", "entry",
 *   "ids", "builtin", "rule", "pattern", "dtype", "arch"} -> {"entries"|"entry"|"removed"|
 *   "export", "dir", "version"}. "add" stores an entry only with a passing gate record for its
 *   source and semantics (registry.hpp); running the gates is the caller's duty. */
int fact_engine_discover(const char* request_json, char** response_json);
int fact_engine_agent_task(const char* request_json, char** response_json);
int fact_engine_build(const char* request_json, char** response_json);
int fact_engine_realize(const char* request_json, char** response_json);
int fact_engine_device(const char* request_json, char** response_json);
int fact_registry(const char* request_json, char** response_json);

/* `fact optimize`'s engine stages (fact/engine/optimize_stages.hpp), driven in one process by
 * python/fact/optimize_run.py; JSON in, JSON out like fact_engine_plan.
 *
 * fact_optimize_plan: fact_engine_plan's request with "graph_json" (the captured graph, in
 *   memory), "report_dir" (the run's folder) plus "model", "dtype", "no_tune_asked" -> plans ->
 *   {"plan", "plan_document", "precision", "skipped", "compiled", "failed_kernels", "gpu_unavailable", "text": the
 *   discovery table, the tuned calls, the kernel table and the roofline as the terminal shows
 *   them, "detail": the per-configuration tuning tables}. Its results stay in this process for:
 * fact_optimize_plan_output: the same, but every line goes to `output` as the engine writes it
 *   (the discovery table first, before anything is compiled; then the kernels to build, the
 *   build and tuning progress, the tables), and "text" is "". The request's "terminal" (bool:
 *   the caller shows a terminal) and "columns" say how progress is drawn. `output(kind, text,
 *   user)`, `text` one line without its newline, valid during the call only; it may be called
 *   from the engine's worker threads, one call at a time:
 *     kind 0  a line: for the terminal and the log
 *     kind 1  the status line, to redraw in place (terminal only; "" clears it); never logged
 *     kind 2  a line for the log only (the status line shows the same on the terminal)
 * fact_optimize_report: {"out_dir", "package": {"written", "path", "note"}, "end_to_end": e2e.md
 *   text, "skipped": [...]} -> writes <out_dir>/report.md and report.json -> {"report", "skipped", "document": report.json's}. */
typedef void (*fact_output_fn)(int kind, const char* text, void* user);
int fact_optimize_plan(const char* request_json, char** response_json);
int fact_optimize_plan_output(const char* request_json, fact_output_fn output, void* user, char** response_json);
int fact_optimize_report(const char* request_json, char** response_json);

/* Frees a string the engine returned. */
void fact_engine_free(char* text);

/* "FACT_OK", "FACT_ERR_CANNOT_IMPLEMENT", ...: from the one table of FactStatus names
 * (fact/core/status_names.hpp; "FACT_STATUS_<n>" for a value it does not know). */
const char* fact_status_name(int status);

/* The engine's vocabulary tables as one JSON document (owned by the library, never freed): the
 * FactStatus names, the dtypes (names, aliases, ABI values, sizes), the precision modes and the
 * tolerance of each (precision, output dtype) (fact/engine/engine_tables.hpp). Python reads its
 * tables from here (python/fact/engine_tables.py) instead of repeating them. */
const char* fact_engine_tables(void);

/* "<version> <git sha>" of the engine library. */
const char* fact_engine_version(void);

/* The host (CPU, float64) reference of any registered kind: computes what a kernel computes for
 * the same argument image, reading and writing host memory. FACT_OK, or FACT_ERR_INVALID_ARGS
 * for an unknown kind, a wrong ABI version/size or malformed arguments. */
int fact_reference_call(const FactCallHeader* args);

/* FACT's one verifier (docs/runtime.md, "What is checked") for one call of `entry` given as data:
 * request_json is {"device": "host"|"cuda", "call": {"operands", "results" (each "dtype",
 * "shape", "stride"), "args": {"size", "hex", "pointers"}}, "tolerance", "seed", "verify_only",
 * "timing": {...}, "settle_s"} (include/fact/engine/call_verify.hpp). The caller supplies:
 *   fill(user, index, operands): writes input set `index` (0 or 1) into host buffers, one per
 *     operand, laid out as its strided storage; returns 0 (anything else fails the run);
 *   reference(user, operands, results): the float64 results, dense and row-major, from host
 *     copies of the operands as they are after the call; returns 0;
 *   baseline (may be NULL): a named other implementation of the call (the agent's gates: the
 *     replaced subgraph run by PyTorch). baseline->call(baseline->user, operands, results, stream)
 *     computes the call from the verifier's own input buffers (backend memory: host or the CUDA
 *     device, each buffer's storage start, laid out as for fill) on `stream` (a cudaStream_t;
 *     NULL on the host); returns 0. With `results` (the verifier's result buffers) it writes the
 *     results there: the verifying call, once, checked against the reference. With `results`
 *     NULL it is a timed run: it computes the call into memory of its own and writes nothing of
 *     the verifier's, so that a copy into the verifier's buffers is not timed as the baseline's
 *     work. The timed runs are interleaved with the kernel's by the same timer:
 *     report["baselines"][baseline->name] ("ms", "status", "check"), as every kind's baselines
 *     are reported.
 * The verifier allocates (guard bands), poisons, calls on the primary and a second stream (on the
 * host: thread), compares, checks guards, inputs and completion, and times the kernel. Returns 0
 * when *response_json is {"status": "ok", "report": <the fact.run/1 report>}, else
 * {"status": "error", "error": ...}; free it with fact_engine_free. */
typedef int (*FactFillInputs)(void* user, int index, void* const* operands);
typedef int (*FactReferenceResults)(void* user, const void* const* operands, double* const* results);
typedef int (*FactBaselineCall)(void* user, void* const* operands, void* const* results, void* stream);
typedef struct FactBaseline {
  const char* name; /* the report's name for it; NULL or "": "pytorch" */
  FactBaselineCall call;
  void* user;
} FactBaseline;
int fact_verify_call(const char* request_json, FactEntry entry, FactFillInputs fill,
                     FactReferenceResults reference, const FactBaseline* baseline, void* user,
                     char** response_json);

#ifdef __cplusplus
}
#endif
#endif /* FACT_ENGINE_C_API_H */
