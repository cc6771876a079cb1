"""The command line, `python -m fact.conformance` (__main__.py): the CPU run (default, --cpu),
the GPU benchmark (--gpu, what `fact bench conformance` runs), the workers it starts (--worker,
--prepare-worker: hidden options), and --summarize."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from fact.conformance.corpus import CORPUS_DIR, REPO_ROOT, corpus_files, write_json
from fact.conformance.cpu import (BASELINE_FILE, baseline_of, compare, dump_baseline, format_diff,
                                  format_table, run_cpu)
from fact.conformance.driver import _worker, run_gpu
from fact.conformance.gpu_report import merge_results, plot_gpu, render_gpu_markdown, short_table
from fact.conformance.lanes import visible_gpus
from fact.conformance.prepare import PREPARE_BUDGET_SHARE, _prepare_worker, default_prepare_jobs


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m fact.conformance",
        description="FACT on the conformance corpus: the CPU run at CPU_TEST_SIZES and its "
                    "coverage table (default, --cpu), or the GPU benchmark at full size (--gpu, "
                    "what `fact bench conformance` runs).")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--cpu", action="store_true", help="the CPU run (default)")
    mode.add_argument("--gpu", action="store_true", help="the GPU benchmark")
    mode.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    mode.add_argument("--prepare-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("files", nargs="*", type=Path, help="corpus files (default: all)")
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR)
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="plans, graphs, case records and logs (default: a fresh temporary folder)")
    cpu = parser.add_argument_group("CPU run")
    cpu.add_argument("--json", type=Path, default=None,
                     help="write the coverage table here (default $FACT_CONFORMANCE_OUT or "
                          "out/conformance/coverage.json)")
    cpu.add_argument("--baseline", type=Path, default=BASELINE_FILE,
                     help="the committed table to compare with (default corpus/coverage-cpu.json)")
    cpu.add_argument("--write-baseline", action="store_true",
                     help="(re)write the committed table from this run")
    cpu.add_argument("--remainder", default="eager", choices=("eager", "inductor"))
    gpu = parser.add_argument_group("GPU benchmark")
    gpu.add_argument("-o", "--out-dir", type=Path, default=REPO_ROOT / "bench" / "results",
                     help="results folder (default bench/results)")
    gpu.add_argument("--models", type=lambda s: [m for m in s.split(",") if m], default=None,
                     help="comma-separated stems or stem:dtype (default: all cases)")
    gpu.add_argument("--quick", action="store_true", help="the QUICK subset only")
    gpu.add_argument("--dtypes", type=lambda s: s.split(","), default=None,
                     help="comma-separated: bfloat16,float32")
    gpu.add_argument("--tune", type=int, default=2, help="configurations tuned per kernel (default 2)")
    gpu.add_argument("--time-budget", type=float, default=0.0,
                     help="seconds; cases that would start later are skipped (default: no limit)")
    gpu.add_argument("--prepare-jobs", type=int, default=None, metavar="N",
                     help="worker processes of the prepare phase, which runs each case's "
                          "fact.optimize and torch.compile in parallel before the serial "
                          "measurements, timing nothing, so that those find the kernels (nvcc) and "
                          "Inductor's compiled graphs cached; 0: no prepare phase (default: "
                          "min(8, cores/2) on a GPU, 0 with --device cpu)")
    gpu.add_argument("--prepare-budget", type=float, default=None, metavar="SECONDS",
                     help="seconds from the start that the prepare phase may take: no case starts "
                          "after, the workers still running are stopped, the measurements go on "
                          f"with what is left (default {PREPARE_BUDGET_SHARE * 100:.0f}%% of --time-budget; "
                          "no limit without one). It compiles what the measurement compiles, with "
                          "the same --tune (tuning candidates included, timed on the shared GPU into "
                          "a scratch tuning database: the measurement times them again and stores its "
                          "choice); the composed module's Inductor remainder reuses only its Triton "
                          "kernels (see the notes on the prepare phase in fact/conformance/prepare.py)")
    gpu.add_argument("--gpus", type=int, default=1, metavar="N",
                     help="measure in N lanes, one per GPU (the first N visible ones; 0: all), "
                          "each lane's workers on their own GPU and their own share of the cores, "
                          "taking cases from one queue; the prepare workers spread over the same "
                          "GPUs (default 1: the serial measurement)")
    gpu.add_argument("--resume", type=Path, default=None, metavar="RESULTS_JSON",
                     help="keep the cases this earlier results file measured (status ok or "
                          "wrong; its records go into this run's file as they are, marked "
                          "resumed_from) and measure the rest: a run that did not fit one call "
                          "goes on in the next")
    gpu.add_argument("--remeasure", type=lambda s: [m.replace(":", "-") for m in s.split(",") if m],
                     default=None, metavar="CASES",
                     help="with --resume: these cases (stem or stem:dtype, comma-separated) are "
                          "measured again even where the earlier file has them")
    gpu.add_argument("--iters", type=int, default=30)
    gpu.add_argument("--warmup", type=int, default=5)
    gpu.add_argument("--flush-mb", type=int, default=256)
    gpu.add_argument("--sizes", choices=("full", "cpu"), default="full",
                     help="full: the files' own constants; cpu: CPU_TEST_SIZES (smoke test)")
    gpu.add_argument("--device", default="cuda", help="cuda (default) or cpu (smoke test)")
    gpu.add_argument("--variant", default="", help="suffix of the results file name")
    gpu.add_argument("--summarize", type=Path, default=None, metavar="RESULTS_JSON",
                     help="print the short table of a results file and exit")
    gpu.add_argument("--merge", type=Path, nargs="+", default=None, metavar=("OUT_JSON", "RESULTS_JSON"),
                     help="write OUT_JSON (and its .md and .png) from results files of one device, "
                          "oldest first: per case the last measured record, earlier ones marked "
                          "resumed_from, and exit")
    gpu.add_argument("--date", default=time.strftime("%Y-%m-%d", time.gmtime()), help=argparse.SUPPRESS)
    gpu.add_argument("--queue", default=None, help=argparse.SUPPRESS)
    gpu.add_argument("--started", type=float, default=0.0, help=argparse.SUPPRESS)
    gpu.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    gpu.add_argument("--prepare-deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    gpu.add_argument("--worker-number", type=int, default=0, help=argparse.SUPPRESS)
    gpu.add_argument("--lane", type=int, default=0, help=argparse.SUPPRESS)
    gpu.add_argument("--lanes", type=int, default=1, help=argparse.SUPPRESS)
    gpu.add_argument("--gpu-name", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.gpus < 0:
        parser.error(f"--gpus {args.gpus}: give a number of GPUs (0: all)")
    if args.gpus == 0 and args.device.startswith("cuda"):
        args.gpus = len(visible_gpus())
    if args.prepare_jobs is None:
        args.prepare_jobs = default_prepare_jobs(args.device, args.gpus)
    if args.prepare_budget is None:
        args.prepare_budget = PREPARE_BUDGET_SHARE * args.time_budget

    if args.summarize:
        print(short_table(json.loads(args.summarize.read_text())))
        return 0
    if args.merge:
        if len(args.merge) < 3:
            parser.error("--merge OUT_JSON RESULTS_JSON RESULTS_JSON...: two results files or more")
        out, inputs = args.merge[0], args.merge[1:]
        try:
            doc = merge_results([json.loads(p.read_text()) for p in inputs], [str(p) for p in inputs])
        except ValueError as error:
            parser.error(str(error))
        write_json(out, doc)
        out.with_suffix(".md").write_text(render_gpu_markdown(doc))
        problem = plot_gpu(doc, out.with_suffix(".png"))
        print(short_table(doc) + (f"\nplot: {problem}" if problem else ""))
        return 0
    if args.gpu or args.worker or args.prepare_worker:
        args.work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="fact_conformance_gpu_"))
        if args.gpu:
            # what the workers get: this command line without the mode, with the resolved
            # folders and date
            args.passed = [a for a in argv if a != "--gpu"] + [
                "--work-dir", str(args.work_dir), "--out-dir", str(args.out_dir), "--date", args.date,
                "--gpus", str(args.gpus)]
            return run_gpu(args)
        return _prepare_worker(args) if args.prepare_worker else _worker(args)

    files = [Path(f) for f in args.files] or corpus_files(args.corpus)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="fact_conformance_"))
    table = run_cpu(files, work, remainder=args.remainder)
    out = args.json or Path(os.environ.get("FACT_CONFORMANCE_OUT", "out/conformance/coverage.json"))
    write_json(out, table)
    print("\n" + format_table(table))
    if args.baseline.is_file() and not args.write_baseline:
        print("\n" + format_diff(compare(table, json.loads(args.baseline.read_text()))))
    if args.write_baseline:
        args.baseline.write_text(dump_baseline(baseline_of(table)))
        print(f"\nwrote {args.baseline}")
    print(f"\nwrote {out}")
    return 0 if table["totals"]["crash"] == 0 and table["totals"]["wrong"] == 0 else 1
