"""What the synthesis loop says to the model: the task (the subgraph, its reference semantics,
the call and its ABI, the gates), the retrieved examples, and the feedback after a failed
attempt (compiler diagnostics with file and line; the gate that failed, with where and how
much)."""
from __future__ import annotations

import json

from fact.agent.fragment import Fragment

MAX_EXAMPLE_CHARS = 2500

SYSTEM = """You write high-performance kernels for FACT, which replaces subgraphs of PyTorch models with \
verified kernels. You are given one subgraph: its reference semantics (the ATen ops it computes), the \
tensors it reads and writes, and the C ABI your kernel implements. Reply with exactly one fenced code \
block holding a complete translation unit. It must:
- #include "fact/runtime/fact_subgraph_abi.h" and define
  extern "C" int fact_entry(const FactCallHeader* args, void* workspace, size_t* workspace_size, void* stream);
- when workspace_size != NULL: store the workspace bytes needed (0 if none) and return FACT_OK without computing;
- otherwise check args (abi_version == FACT_ABI_VERSION, kind == fact_kind_id("subgraph"), size == \
sizeof(FactSubgraphArgs)) and return FACT_ERR_INVALID_ARGS when wrong, FACT_ERR_CANNOT_IMPLEMENT for \
shapes or dtypes it does not handle;
- compute every element of every result from the operands (shapes and strides are in the arguments; \
strides are in elements), never write an operand, keep no state between calls;
- have every result written when it returns (host) or when `stream` is synchronized (CUDA: launch on \
`stream`, nowhere else);
- not define fact_kernel_info or main (FACT adds the ABI's other symbols).
FACT checks it against the reference in float64 on fresh random inputs with poisoned outputs, for \
unchanged inputs, untouched guard bands, NaN/inf, a re-run on re-poisoned outputs, new inputs in the same \
buffers, fresh buffers on another stream/thread, and times it against PyTorch. Any shortcut fails."""


def _tensor_line(index: int, tensor: dict) -> str:
    return (f"  [{index}] {tensor['value']}: {str(tensor.get('dtype', '')).removeprefix('torch.')} "
            f"shape {tensor.get('shape')} stride {tensor.get('stride')}")


def task_message(task: dict, examples: list, device: str) -> str:
    """The first user message for an agent task (fact.agent.task/1)."""
    match = task.get("match", {})
    call = task["call"]
    fragment = Fragment(task["semantics"]["fragment"])
    target = ("the host CPU: C++17, compiled with `c++ -std=c++17 -O2 -shared -fPIC -pthread`; pointers are host "
              "memory, `stream` is NULL" if device == "host" else
              "an NVIDIA Hopper GPU (sm_90a): CUDA C++17 compiled by nvcc with -O3 -DNDEBUG and the CUTLASS/CuTe headers "
              "of the nvidia-cutlass wheel on the include path; pointers are device memory; `stream` is a cudaStream_t; "
              "ptxas warning C7510 (wgmma serialized) fails the build")
    lines = [
        f"Write a kernel for match #{task.get('label')} `{match.get('rule')}` (pattern folder `{match.get('pattern')}`) "
        f"of module `{task.get('module', '')}`, dtype {match.get('dtype')}, precision mode {task.get('precision')}.",
        f"Target: {target}.",
        "",
        "Reference semantics (the captured ATen ops it replaces, in order; values read from outside are the operands):",
        *[f"  {line}" for line in fragment.describe()],
        "",
        "Operands (args->operands[i], read only):",
        *[_tensor_line(i, t) for i, t in enumerate(call["operands"])],
        "Results (args->results[i], write every element):",
        *[_tensor_line(i, t) for i, t in enumerate(call["results"])],
        f"Tolerance: ||out - ref||_2 / ||ref||_2 <= {call.get('tolerance'):.1e} against the float64 reference.",
        "",
        "The ABI header (include/fact/runtime/fact_subgraph_abi.h):",
        "```c",
        task.get("abi", {}).get("text", "").strip(),
        "```",
    ]
    if examples:
        lines += ["", "Vetted examples (from FACT's registry and the CUTLASS examples), most relevant first:"]
        budget = MAX_EXAMPLE_CHARS * 3
        for example in examples:
            excerpt = example.excerpt[:min(MAX_EXAMPLE_CHARS, max(budget, 0))]
            budget -= len(excerpt)
            lines += [f"- {example.source}: {example.id} — {example.title}"]
            if excerpt:
                lines += ["```", excerpt, "```"]
    lines += ["", "Reply with the complete source in one code block."]
    return "\n".join(lines)


def compile_feedback(build: dict) -> str:
    diagnostics = build.get("diagnostics", [])
    errors = [d for d in diagnostics if d.get("severity") == "error"] or diagnostics
    shown = [f"{d.get('file') or '(no file)'}:{d.get('line')}:{d.get('column')}: {d.get('severity')}: {d.get('message')}"
             for d in errors[:15]]
    if not shown:
        shown = [build.get("log", "")[-3000:]]
    return ("Your kernel did not compile (" + str(build.get("reason") or build.get("status")) + "). Compiler "
            "diagnostics:\n" + "\n".join(shown) + "\nFix it and reply with the complete corrected source in one code block.")


def gate_feedback(report: dict) -> str:
    checks = ", ".join(f"{c['name']} {'ok' if c['passed'] else 'FAILED'}" for c in report.get("checks", []))
    failed = next((c for c in report.get("checks", []) if not c["passed"]), {})
    data = {k: v for k, v in (failed.get("data") or {}).items() if k in ("index", "value", "reference", "magnitude",
                                                                          "rel_err", "tolerance", "output")}
    where = f"\nWhere: {json.dumps(data)}" if data else ""
    return (f"Your kernel compiled but failed FACT's gate `{report.get('failed_check')}`: {report.get('failure')}{where}\n"
            f"Checks: {checks}.\nFix it and reply with the complete corrected source in one code block.")


def slow_feedback(timing: dict) -> str:
    return (f"Your kernel passed every gate but is slower than PyTorch's run of the same subgraph "
            f"({timing.get('ms')} ms vs {timing.get('baseline_ms')} ms, same process, same inputs): FACT registers "
            f"only kernels at least as fast as what they replace. Make it faster and reply with the complete source "
            f"in one code block.")


def no_code_feedback() -> str:
    return ("Your reply held no code block defining fact_entry. Reply with the complete source of the kernel in one "
            "fenced code block (```cpp ... ```).")
