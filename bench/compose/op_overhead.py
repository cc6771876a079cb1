"""Per-call CPU time of `fact::launch` against eager PyTorch (needs a CUDA GPU and the engine).

Composes a tiny MLP (Linear -> GELU(tanh) -> Linear; shapes small enough that the CPU, not the
GPU, bounds a call) with `fact.optimize`, which realizes and compiles its FACT kernels through
the kernel cache, then times, per call, with time.perf_counter over `--calls` back-to-back calls
(the GPU keeps up, no synchronization inside the timed loop; the median of `--repeats` runs):

    fact_launch_us       torch.ops.fact.launch on the first composed call's operands
    launch_floor_us      (native only) fact_native::launch_floor, an op with fact::launch's
                         arguments that does nothing: what passing them from Python costs
    linear_us, addmm_us  F.linear / torch.addmm on the same layer's operands
    *_inference_us       fact::launch and F.linear under torch.inference_mode (no autograd
                         dispatch: the difference to no_grad is what the Autograd key costs)
    composed_graph_us    the composed graph (its fact::launch calls + the PyTorch rest)
    eager_module_us      the original module
    composed_module_us   the ComposedModule (its input guard included)

Runs once with the implementation this process registers (native C++ when it builds) and once
in a child process with FACT_NATIVE=0 (the Python ctypes path), then prints both and writes
JSON (`--out`, default op_overhead.json). The timed functions take turns within each repeat
(interleaved, the order rotating), so a loaded host weighs on all of them alike.

    PYTHONPATH=python FACT_ENGINE=build/fact python bench/compose/op_overhead.py --out out.json
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

import fact
import fact.ops
from fact.versions import collect_versions
from fact import native


class NothingComposed(RuntimeError):
    pass


@dataclass
class Setup:
    model: torch.nn.Module
    x: torch.Tensor
    composed: object
    launch_calls: list = field(default_factory=list)  # (operands, call) of the fact::launch calls


class TinyMLP(torch.nn.Module):
    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.up = torch.nn.Linear(features, hidden)
        self.down = torch.nn.Linear(hidden, features)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x), approximate="tanh"))


class _LaunchRecorder(torch.fx.Interpreter):
    def __init__(self, module):
        super().__init__(module)
        self.calls = []

    def call_function(self, target, args, kwargs):
        if target is torch.ops.fact.launch.default:
            self.calls.append((list(args[0]), int(args[1])))
        return super().call_function(target, args, kwargs)


def compose_mlp(precision: str = "tf32", work_dir=None, tokens: int = 8,
                features: int = 256, hidden: int = 512, device: str = "cuda") -> Setup:
    """The composed MLP and its fact::launch calls (operands, call number). On "cuda" every
    call runs a kernel (else NothingComposed); "cpu" (the host reference) checks this script."""
    torch.manual_seed(0)
    model = TinyMLP(features, hidden).to(device).eval()
    x = torch.randn(tokens, features, device=device)
    options = {"work_dir": work_dir or tempfile.mkdtemp(prefix="fact-op-overhead-")}
    accepted = inspect.signature(fact.optimize).parameters
    if "remainder" in accepted:
        options["remainder"] = "eager"  # time the graph's own calls, not Inductor's
    if "verify" in accepted:
        options["verify"] = False
    if "speed_guard" in accepted:
        options["speed_guard"] = False
    composed = fact.optimize(model, (x,), precision=precision, **options)
    if composed.graph_module is None:
        raise NothingComposed(f"nothing was composed: {composed.fact_report}")
    recorder = _LaunchRecorder(composed.graph_module)
    with torch.no_grad():
        recorder.run(x)
    if not recorder.calls:
        raise NothingComposed(f"no fact::launch call: {composed.fact_report}")
    return Setup(model, x, composed, recorder.calls)


def interleaved_per_call_us(functions: dict, calls: int = 200, repeats: int = 30,
                            synchronize=None) -> dict:
    """{name: median over `repeats` of the CPU time per call (us) of `calls` back-to-back calls}
    for `functions` = {name: (function, mode)}, each run under `mode()` (no_grad, or
    inference_mode). The functions take turns within each repeat, the order rotating, so that
    whatever else loads the host weighs on all of them alike."""
    synchronize = synchronize or torch.cuda.synchronize
    names = list(functions)
    samples = {name: [] for name in names}
    for name in names:
        function, mode = functions[name]
        with mode():
            for _ in range(10):
                function()
    synchronize()
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            function, mode = functions[name]
            with mode():
                start = time.perf_counter()
                for _ in range(calls):
                    function()
                samples[name].append((time.perf_counter() - start) / calls)
            synchronize()
    return {name: sorted(values)[len(values) // 2] * 1e6 for name, values in samples.items()}


def op_timings(setup: Setup, calls: int = 200, repeats: int = 30) -> dict:
    launch = torch.ops.fact.launch.default
    operands, call = setup.launch_calls[0]
    first = setup.model.up
    x, weight, bias = setup.x, first.weight, first.bias
    weight_t = weight.t()
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    no_grad, inference = torch.no_grad, torch.inference_mode
    functions = {
        "fact_launch_us": (lambda: launch(operands, call), no_grad),
        "linear_us": (lambda: F.linear(x, weight, bias), no_grad),
        "addmm_us": (lambda: torch.addmm(bias, x, weight_t), no_grad),
        "composed_graph_us": (lambda: setup.composed.graph_module(x), no_grad),
        "eager_module_us": (lambda: setup.model(x), no_grad),
        "composed_module_us": (lambda: setup.composed(x), no_grad),
        "fact_launch_inference_us": (lambda: launch(operands, call), inference),
        "linear_inference_us": (lambda: F.linear(x, weight, bias), inference),
    }
    if native.active():
        floor = torch.ops.fact_native.launch_floor.default
        functions["launch_floor_us"] = (lambda: floor(operands, call), no_grad)
    timings = {"implementation": fact.ops.describe_implementation(x.device.type)}
    timings.update(interleaved_per_call_us(functions, calls, repeats, sync))
    return timings


GOAL_EXCESS_US = 1.0   # a composed tiny GEMM's launch at most cuBLAS's + 1 us


def overhead_cases(row: dict) -> list[dict]:
    """The comparisons a results file states, each baseline and FACT's time from the same run:
    fact::launch against F.linear on the same layer (the launch-overhead goal: at most
    GOAL_EXCESS_US more), the composed graph and the ComposedModule against the eager module."""
    def case(name: str, baseline: str, ours: str, goal_excess_us: float | None = None) -> dict:
        entry = {"name": name, "baseline": baseline, "baseline_us": row[baseline], "fact": ours,
                 "fact_us": row[ours], "ratio": row[baseline] / row[ours],
                 "excess_us": row[ours] - row[baseline]}
        if goal_excess_us is not None:
            entry["goal_excess_us"] = goal_excess_us
            entry["goal_met"] = entry["excess_us"] <= goal_excess_us
        return entry
    return [case("one fact::launch vs F.linear (host time per call)", "linear_us", "fact_launch_us",
                 GOAL_EXCESS_US),
            case("one fact::launch vs F.linear under inference_mode", "linear_inference_us",
                 "fact_launch_inference_us"),
            case("composed graph vs the eager module", "eager_module_us", "composed_graph_us"),
            case("ComposedModule (guards, CUDA graph) vs the eager module", "eager_module_us",
                 "composed_module_us")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="tf32")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--out", default="op_overhead.json")
    parser.add_argument("--only-this-process", action="store_true",
                        help="measure the implementation of this process only (no ctypes child)")
    options = parser.parse_args()
    if not torch.cuda.is_available():
        print("op_overhead: needs a CUDA GPU", file=sys.stderr)
        return 2
    setup = compose_mlp(options.precision, options.work_dir)
    label = "native" if native.active() else "ctypes"
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "versions": collect_versions(torch.device("cuda", torch.cuda.current_device())),
               "precision": options.precision, "calls": options.calls,
               "repeats": options.repeats, label: op_timings(setup, options.calls, options.repeats)}
    if label == "native":
        results["native_build"] = str(native.library_path())
    else:
        results["native_unavailable"] = native.reason()
    if not options.only_this_process and label == "native":
        child_out = Path(options.out).with_suffix(".ctypes.json")
        env = dict(os.environ, FACT_NATIVE="0")
        command = [sys.executable, __file__, "--only-this-process", "--precision",
                   options.precision, "--calls", str(options.calls), "--repeats",
                   str(options.repeats), "--out", str(child_out)]
        child = subprocess.run(command, env=env, capture_output=True, text=True)
        if child.returncode == 0:
            results["ctypes"] = json.loads(child_out.read_text())["ctypes"]
        else:
            results["ctypes_error"] = (child.stdout + child.stderr)[-2000:]
    if label == "native":
        results["cases"] = overhead_cases(results["native"])
    Path(options.out).write_text(json.dumps(results, indent=2) + "\n")
    for name in ("native", "ctypes"):
        if name in results:
            row = results[name]
            print(f"{name:7s} fact::launch {row['fact_launch_us']:6.1f} us | F.linear "
                  f"{row['linear_us']:5.1f} | addmm {row['addmm_us']:5.1f} | composed graph "
                  f"{row['composed_graph_us']:6.1f} vs eager module {row['eager_module_us']:6.1f} "
                  f"({row['composed_graph_us'] / row['eager_module_us']:.2f}x) | ComposedModule "
                  f"{row['composed_module_us']:6.1f}"
                  + (f" | argument floor {row['launch_floor_us']:5.1f}" if "launch_floor_us" in row else ""))
    print(f"wrote {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
