"""FACT on the conformance corpus (corpus/): does it run on models written elsewhere
without a crash or a wrong answer, and how much of each model does it cover?

One generator for both runs:

- CPU (`python -m fact.conformance --cpu`, and tests/python/test_conformance.py in CI): every
  corpus file at its CPU_TEST_SIZES, in each of its DTYPES (float32 in `strict`, bfloat16 in
  `native`): `fact.optimize` on the CPU (replacements run the engine's float64 host reference),
  the composed output against the original run in float64, and the coverage table.
- GPU (`python -m fact.conformance --gpu`, what `fact bench conformance` starts): the corpus
  files at their full sizes on a CUDA GPU: FACT (tuned over a few configurations) against eager
  and torch.compile in the same process, all verified against float64, written as
  `conformance-<device>-<date>.json` (docs/architecture.md) with a plot and a readable table.
  A prepare phase first runs the cases' compile work in parallel workers, timing nothing, so
  that the serial measurements find it cached (--prepare-jobs; "The prepare phase" in prepare.py).
  On a machine with several GPUs, --gpus N measures in N lanes, one per GPU (lanes.py), and
  --resume takes the cases an earlier results file measured instead of measuring them again.

The coverage of one (model, dtype) (`coverage_row`):

- `matches`: the replacements the engine's plan lists (planned, declined, pending, failed);
- `composed`: those `fact.optimize` composed (verified against the subgraph they replace);
- `declined`: everything left to PyTorch (`.fact_report.left_to_pytorch`, the module itself
  when nothing was planned), `declined_by_reason` the same grouped by reason with the numbers
  and shapes taken out (`reason_group`);
- `gemm_flops`: the model's matrix-product FLOPs in one forward, counted on the captured graph
  (graph.json, the graph the engine discovers on; `graph_gemm_flops`): linear / matmul / mm /
  bmm / addmm / baddbmm as 2 x (output elements) x K, einsum as 2 x the product of its index
  sizes, scaled_dot_product_attention as its two products 2·B·H·Sq·Sk·(Dqk + Dv) (masks and
  causality not discounted: the same count on both sides of the share). The CPU run
  cross-checks it against a count at the dispatcher (`counted_gemm_flops`: mm / addmm / bmm /
  baddbmm with torch.utils.flop_counter's formulas, SDPA kernels as above), which also stands
  in when no graph was captured;
- `fact_flops`: the GEMM FLOPs of the captured nodes that the composed replacements replaced
  (each replacement's `nodes` in the plan), `matched_flops` the same over every match;
- `share` = fact_flops / gemm_flops: the part of the model's GEMM FLOPs that runs in FACT
  kernels (None for a model without GEMMs); `matched_share` the part discovery matched;
- `plan_fact_flops`: the plan's own `flops` summed over the composed calls of GEMM_KINDS (the
  engine's count of the kernels' work: a causal attention counts half its square), for reference.

The package, one file per concern (this module re-exports the names other code uses, so that
`from fact.conformance import ...` and `conformance.<name>` work as before):

- corpus.py: the corpus files, their dtypes, building a model, the float64 check, file helpers
  (what both runs share);
- coverage.py: GEMM FLOPs and the coverage of one (model, dtype) (coverage_row);
- cpu.py: the CPU run, its coverage table and the comparison with corpus/coverage-cpu.json;
- gpu_case.py: the GPU run's cases and one case measured (run_gpu_case);
- gpu_report.py: the GPU results' summary, readable table, plot and short table;
- prepare.py: the GPU run's prepare phase (its notes say what it warms and how);
- lanes.py: the GPU run's measurement lanes (one per GPU; claims from one queue) and --resume;
- driver.py: the GPU run's driver (run_gpu), its measurement worker and results files;
- cli.py, __main__.py: `python -m fact.conformance`.

Re-exported names are bindings: to replace one in a test, patch it in the module that uses it
(e.g. fact.conformance.driver.run_gpu_case), not here.
"""
from __future__ import annotations

from fact.conformance.corpus import (CATEGORIES, CORPUS_DIR, DTYPE_BY_NAME, OUTPUT_BOUND,
                                     PRECISION_BY_DTYPE, REPO_ROOT, TORCH_ERROR_FACTOR,
                                     _call_get_inputs, _first_line, _single_tensor, build,
                                     build_case, corpus_files, file_dtypes, float64_output, load_file,
                                     load_json, output_bound, quiet_torch, relative_error,
                                     write_json)
from fact.conformance.coverage import (GEMM_KINDS, _CALL_LABEL, _NUMBER, _SHAPE, _einsum_flops,
                                       _numel, _share, counted_gemm_flops, coverage_row,
                                       graph_gemm_flops, reason_group)
from fact.conformance.cpu import (BASELINE_FILE, STABLE_COVERAGE_KEYS, STABLE_ROW_KEYS,
                                  TABLE_SCHEMA, _rounded, baseline_of, compare, dump_baseline,
                                  format_diff, format_table, make_table, row_key, run_cpu,
                                  run_cpu_case)
from fact.conformance.gpu_case import (QUICK, STRICT_CATEGORIES, SUITE, WORKER_LOST_EXIT, _log,
                                       device_slug, gpu_cases, run_gpu_case)
from fact.conformance.gpu_report import (_geomean, plot_gpu, render_gpu_markdown, short_table,
                                         summarize_gpu)
from fact.conformance.prepare import (PREPARE_BUDGET_SHARE, PREPARE_DIR,
                                      PREPARE_GPU_MEMORY_SHARE, _end_with_the_driver, claim,
                                      _kill_group, _prepare_worker, _PreparePhase,
                                      _release_case_memory, _share_machine, available_cores,
                                      cache_activity, cache_counters, default_prepare_jobs,
                                      kernel_cache_entries, prepare_gpu_case, prepare_record_path,
                                      scratch_tuning_db, share_compile_caches, shared_caches,
                                      with_prepare_record)
from fact.conformance.lanes import (MEASURE_DIR, LaneError, Measurements, claim_case,
                                     current_path, lane_cores, lane_gpus, pin_to_lane,
                                     resumed_records, visible_gpus)
from fact.conformance.driver import _prepare_deadline, _settings, _worker, run_gpu
from fact.conformance.run_files import _Run
from fact.conformance.cli import main
