"""The CPU run's declared-range check (docs/dynamic_shapes.md): a corpus model whose inputs
share a batch dimension is optimized once more with that dimension declared dynamic
(`batch=1..RANGE_MAX`), then called at several batch sizes — 1, the example's, one past it,
the range's maximum — each output checked against the original model run in float64 at that
size, within the same bound as the static check. Inside the range the composed module must
never fall back to the original (strict=True turns a fallback into an error).

`batch_dimension(inputs)` says whether a case has such a dimension (every tensor input has
the first input's size at dim 0, which is at least 2: torch.export specializes a size-1
example); `run_dynamic_check` returns the row's `dynamic` entry and its problems."""
from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any, Sequence

import torch

from fact.conformance.corpus import (_first_line, _single_tensor, float64_output, output_bound,
                                     quiet_torch, relative_error)

RANGE_FACTOR = 2   # the range is batch=1..RANGE_FACTOR × the example's batch


def batch_dimension(inputs: Sequence[Any]) -> tuple[int | None, str]:
    """(the example's batch size, "") when every tensor input has the first one's size at
    dim 0 and it is at least 2; else (None, why not)."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if not tensors or len(tensors) != len(inputs):
        return None, "an input is not a tensor"
    if any(t.dim() == 0 for t in tensors):
        return None, "an input is a scalar tensor"
    batch = tensors[0].shape[0]
    if any(t.shape[0] != batch for t in tensors):
        return None, "the inputs do not share their first dimension"
    if batch < 2:
        return None, "the example's batch is 1 (torch.export specializes it)"
    return batch, ""


def batch_sizes(batch: int) -> list[int]:
    """The sizes the composed module is called at: 1, the example's, one past it, the maximum."""
    top = RANGE_FACTOR * batch
    return sorted({1, batch, batch + 1, top})


def resized(inputs: Sequence[torch.Tensor], size: int, seed: int) -> tuple:
    """Inputs of batch `size` like the example's: floating ones fresh normal values, integer
    and boolean ones the example's rows repeated (token ids and masks stay valid)."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for x in inputs:
        if x.is_floating_point():
            fresh = torch.randn((size, *x.shape[1:]), generator=generator, dtype=torch.float32)
            out.append(fresh.to(dtype=x.dtype, device=x.device))
        else:
            rows = torch.arange(size, device=x.device) % x.shape[0]
            out.append(x[rows].clone())
    return tuple(out)


def run_dynamic_check(model: torch.nn.Module, inputs: Sequence[torch.Tensor], precision: str,
                      work_dir: Path, remainder: str = "eager") -> tuple[dict, list[str], str]:
    """(the row's `dynamic` entry, problems, status: "ok" | "crash" | "wrong" | "skipped").
    Never raises."""
    from fact.compose import optimize
    from fact.dynamic_ranges import Range

    batch, why_not = batch_dimension(inputs)
    if batch is None:
        return {"status": "skipped", "reason": why_not}, [], "skipped"
    declared = Range("batch", 1, RANGE_FACTOR * batch)
    entry: dict = {"range": declared.spec(), "sizes": batch_sizes(batch), "checks": []}
    for index, size in enumerate(entry["sizes"]):
        try:
            with quiet_torch(), torch.no_grad():
                model(*resized(inputs, size, seed=100 + index))
        except Exception as error:  # noqa: BLE001 - the model's own limit, not FACT's
            return ({**entry, "status": "skipped",
                     "reason": f"the model itself does not run at batch {size}: {_first_line(error)}"},
                    [], "skipped")
    started = time.perf_counter()
    try:
        with quiet_torch():
            composed = optimize(model, tuple(inputs), precision, work_dir=work_dir, remainder=remainder,
                                dynamic_shapes=tuple({0: declared} for _ in inputs), strict=True)
    except Exception as error:  # noqa: BLE001 - the thing this check exists to catch
        entry["seconds"] = time.perf_counter() - started
        return entry, [f"fact.optimize with {declared.spec()} raised {_first_line(error)}",
                       traceback.format_exc(limit=-4)], "crash"
    report = composed.fact_report
    constrained = [item.reason for item in report.left_to_pytorch
                   if item.stage == "module" and "Constraints violated" in item.reason]
    if constrained:
        # torch.export proved the forward constrains the dimension (a divisibility or a
        # specialization): the range cannot be declared for this model as written.
        entry.update(status="skipped", reason=f"the model constrains its batch dimension: {constrained[0]}",
                     seconds=time.perf_counter() - started)
        return entry, [], "skipped"
    entry["composed"] = len(report.composed)
    entry["runs"] = report.runs
    entry["symbols"] = [s.get("name") for s in (getattr(report, "symbols", None) or [])]
    problems: list[str] = []
    status = "ok"
    for index, size in enumerate(entry["sizes"]):
        x = resized(inputs, size, seed=100 + index)
        try:
            with quiet_torch(), torch.no_grad():
                got = _single_tensor(composed(*x))
                want = _single_tensor(model(*x))
        except Exception as error:  # noqa: BLE001 - a crash inside the range (strict: a fallback)
            problems.append(f"batch {size}: the composed module raised {_first_line(error)}")
            status = "crash"
            continue
        reference = float64_output(model, x)
        torch_error = relative_error(want, reference)
        fact_error = relative_error(got, reference)
        bound = output_bound(precision, torch_error)
        entry["checks"].append({"batch": size, "fact_rel_err": fact_error,
                                "torch_rel_err": torch_error, "bound": bound})
        if got.shape != want.shape or not fact_error <= bound:
            problems.append(f"batch {size}: output {tuple(got.shape)} rel_err vs float64 "
                            f"{fact_error:.3g} > bound {bound:.1g} (PyTorch's own: {torch_error:.3g})"
                            if got.shape == want.shape else
                            f"batch {size}: composed output {tuple(got.shape)} != original {tuple(want.shape)}")
            status = "wrong" if status == "ok" else status
    entry["seconds"] = time.perf_counter() - started
    entry["status"] = status
    return entry, problems, status
