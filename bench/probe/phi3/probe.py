"""GPU probe for the phi3 Inductor-remainder SIGSEGV (run: bash bench/probe/phi3/run.sh).

Runs fact.optimize on corpus/hf_phi3_decoder.py (bf16, native, full size, remainder inductor,
tune from argv) and logs, flushed line by line to stderr BEFORE each call, every op the first
run of the Inductor-compiled remainder dispatches (through AOT's _AnalyzeCustomOpInputOutputMode,
the frame in the crash stack), with each tensor's shape, stride, storage offset, storage size and
data pointer, and for fact::launch the registered call's operand layouts. The last 'OP' line
before a SIGSEGV names the crashing op and its arguments.
argv: tune [old]   old: undo the compose fix (_pin_layout) to reproduce the original behaviour."""
import faulthandler, json, sys, tempfile, time
from pathlib import Path
faulthandler.enable()
import torch
import fact
from fact import compose, ops
from fact.compose import rewrite
from fact.conformance.corpus import build_case
from torch._functorch._aot_autograd import runtime_wrappers as rw

tune = int(sys.argv[1]) if len(sys.argv) > 1 else 0
if len(sys.argv) > 2 and sys.argv[2] == "old":
    rewrite._pin_layout = lambda graph, node, operand, anchor: (node, anchor)


def describe(x):
    if isinstance(x, torch.Tensor):
        try:
            st = x.untyped_storage().nbytes() // x.element_size()
            ptr = hex(x.data_ptr())
        except Exception as e:  # noqa: BLE001
            st, ptr = f"? ({e})", "?"
        return (f"{x.dtype} {list(x.shape)} stride {list(x.stride())} off {x.storage_offset()} "
                f"storage {st} ptr {ptr} {x.device} defined")
    if isinstance(x, (list, tuple)):
        return "[" + "; ".join(describe(v) for v in x) + "]"
    return repr(x)


original = rw._AnalyzeCustomOpInputOutputMode.__torch_dispatch__


def logging_dispatch(self, func, types, args=(), kwargs=None):
    line = f"OP {func} args {describe(list(args))} kwargs { {k: describe(v) for k, v in (kwargs or {}).items()} }"
    if "fact" in str(func) and len(args) >= 2:
        spec = ops.registered_call(int(args[-1]))
        line += (f"\n   REGISTERED {spec.describe()} operands "
                 f"{[(s.shape, s.stride, str(s.dtype)) for s in spec.operands]} results "
                 f"{[(s.shape, s.stride) for s in spec.results]} slots {spec.slots}")
    print(line, file=sys.stderr, flush=True)
    result = original(self, func, types, args, kwargs)
    if "fact" in str(func):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        print(f"   DONE {func} -> {describe(result)}", file=sys.stderr, flush=True)
    return result


rw._AnalyzeCustomOpInputOutputMode.__torch_dispatch__ = logging_dispatch
torch._functorch.config.check_custom_op_aliasing = True

module, model, inputs = build_case(Path("corpus/hf_phi3_decoder.py"), "bfloat16", *(("cuda", "full") if torch.cuda.is_available() else ("cpu", "cpu")), 0)
work = Path(tempfile.mkdtemp(prefix="phi3-gpu-"))
print("native:", ops.describe_implementation("cuda"), flush=True)
t = time.time()
with torch.no_grad():
    composed = fact.optimize(model, inputs, "native", work_dir=work, remainder="inductor", tune=tune)
report = composed.fact_report
print(f"optimize {time.time() - t:.0f}s remainder: {report.remainder} runs: {report.runs}", flush=True)
for entry in report.composed:
    print("composed", entry.label, entry.rule, [c.summary for c in entry.calls], flush=True)
with torch.no_grad():
    out = composed(*inputs)
    ref = model(*inputs)
print("rel err vs eager bf16", ((out.double() - ref.double()).norm() / ref.double().norm()).item())
