"""Attention in modules composed for training: a written-out attention (q·kᵀ, a scale, a causal
mask, softmax, ·v) runs as PyTorch's fused attention, `scaled_dot_product_attention`, before
AOTAutograd traces the module (docs/compose.md, "Training", "Attention").

FACT's own attention kernel has no backward yet. Left as it is written, a module's attention
trains as two batched products and a softmax whose [T, T] probabilities the forward saves for
the backward (the Llama block: Triton's softmax and its backward, 0.62 ms of a 4.5 ms step).
`F.scaled_dot_product_attention` with the same q, k, v, scale and causal mask computes the
same function; AOTAutograd then traces PyTorch's fused attention forward and its fused backward
(FlashAttention or cuDNN on a GPU), which save only the output and the log-sum-exp.

    fusable_attentions(module, inputs)   the engine's attention matches that can be fused
    FusedAttention(module, attentions)   the module with those attentions fused, per call
    fuse_attention_for_training(...)     both, verified against float64; what was fused and why not

How a match becomes a call: the engine discovers attention in the module's exported graph and
names its nodes; the two products of a written-out attention are `aten.matmul` (or `aten.bmm`)
nodes, the n-th and m-th of their kind in the graph's order. `FusedAttention` runs the module
under a torch-function mode that counts the calls of that kind (the export records one node per
call): at the n-th it keeps q and kᵀ and computes the scores as written (what reads them is dead
code once the m-th call is replaced; AOTAutograd drops it), at the m-th it returns
`scaled_dot_product_attention(q, k, v)`. Operand shapes are checked against the exported
graph's at each call; a mismatch raises, and the module is then traced as written.

Before it is used, the fused module's outputs and gradients on fresh inputs are compared with
the original module's in float64: they must be within twice the original's own error (the
precision the module runs in), or the attention stays written out, with the reason.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from fact.compose.signature import _first_line

# Python-level calls that export records as one aten.matmul / aten.bmm node each.
_MATMUL_CALLS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__}
_BMM_CALLS = {torch.bmm, torch.Tensor.bmm}
_KINDS = {"aten.matmul.default": "matmul", "aten.bmm.default": "bmm"}


@dataclass(frozen=True)
class Attention:
    """One written-out attention to fuse: its products are the `scores_call`-th and `output_call`-th
    call of `kind` ("matmul" or "bmm") in a forward; the operand shapes the export recorded."""
    label: str                 # "matmul..matmul_1": the match's first and last node
    kind: str
    scores_call: int
    output_call: int
    causal: bool
    scale: float
    q_shape: tuple
    k_t_shape: tuple
    v_shape: tuple


class FusionMismatch(RuntimeError):
    """A call the fusion expected is not what the export recorded (another shape, or missing)."""


class _FusedAttentionMode(TorchFunctionMode):
    """One forward's calls (see the module docstring)."""

    def __init__(self, attentions: Sequence[Attention]):
        super().__init__()
        self.by_scores = {(a.kind, a.scores_call): a for a in attentions}
        self.by_output = {(a.kind, a.output_call): a for a in attentions}
        self.counts = {"matmul": 0, "bmm": 0}
        self.kept: dict = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = "matmul" if func in _MATMUL_CALLS else "bmm" if func in _BMM_CALLS else None
        if kind is None:
            return func(*args, **kwargs)
        index = self.counts[kind]
        self.counts[kind] += 1
        if (kind, index) in self.by_scores:
            a = self.by_scores[(kind, index)]
            q, k_t = args[0], args[1]
            if tuple(q.shape) != a.q_shape or tuple(k_t.shape) != a.k_t_shape:
                raise FusionMismatch(f"{a.label}: scores product of {tuple(q.shape)} and {tuple(k_t.shape)}, "
                                     f"exported as {a.q_shape} and {a.k_t_shape}")
            self.kept[a] = (q, k_t)
        elif (kind, index) in self.by_output:
            a = self.by_output[(kind, index)]
            if a not in self.kept or tuple(args[1].shape) != a.v_shape:
                raise FusionMismatch(f"{a.label}: output product without its scores, or v of "
                                     f"{tuple(args[1].shape)} (exported {a.v_shape})")
            q, k_t = self.kept.pop(a)
            return F.scaled_dot_product_attention(q, k_t.transpose(-2, -1), args[1], is_causal=a.causal,
                                                  scale=a.scale)
        return func(*args, **kwargs)


class FusedAttention(torch.nn.Module):
    """`module` (its parameters and buffers its own) with `attentions` fused at every call."""

    def __init__(self, module: torch.nn.Module, attentions: Sequence[Attention]):
        super().__init__()
        self.module = module
        self.attentions = tuple(attentions)

    def forward(self, *args: Any) -> Any:
        mode = _FusedAttentionMode(self.attentions)
        with mode:
            out = self.module(*args)
        if mode.kept:
            raise FusionMismatch(f"scores products without their output product: "
                                 f"{', '.join(a.label for a in mode.kept)}")
        return out


def _shape(graph_value: dict | None) -> tuple:
    return tuple(graph_value["shape"]) if graph_value else ()


def fusable_attentions(discovery: dict, graph: dict) -> tuple[list[Attention], list[tuple[str, str]]]:
    """The engine's attention matches (discovery.json) that are written out with two products of
    one kind, no dropout and no mask but causal (top-left, or bottom-right over equal lengths),
    as Attentions; and (what, why) for the other written-out ones. `graph`: the graph JSON the
    engine planned (its nodes in order, with their targets and output shapes)."""
    nodes = graph["nodes"]
    values = {v["id"]: v for v in graph.get("values", [])}
    order: dict[str, tuple[str, int]] = {}
    counts = {"matmul": 0, "bmm": 0}
    for node in nodes:
        kind = _KINDS.get(node.get("target", ""))
        if kind is not None:
            order[node["id"]] = (kind, counts[kind])
            counts[kind] += 1
    targets = {node["id"]: node.get("target", "") for node in nodes}
    inputs = {node["id"]: [a["tensor"] for a in node.get("args", []) if isinstance(a, dict) and "tensor" in a]
              for node in nodes}
    fused, left = [], []
    for match in discovery.get("matches", []):
        if match.get("pattern") != "attention" or not match.get("problems"):
            continue
        names = match.get("nodes", [])
        what = f"attention at {names[0]}..{names[-1]}" if names else "attention"
        if any(targets.get(n, "").startswith("aten.scaled_dot_product_attention") for n in names):
            continue  # already PyTorch's fused attention: AOTAutograd traces its fused backward
        products = [n for n in names if n in order]
        p = match["problems"][0]
        mask = p.get("mask_kind", "")
        causal = mask.startswith("causal")
        why = None
        if len(products) != 2 or order[products[0]][0] != order[products[1]][0]:
            why = "its products are not two matmul (or two bmm) calls"
        elif p.get("unsupported"):
            why = p["unsupported"]
        elif p.get("dropout", 0.0):
            why = "dropout in training mode (a random mask between the softmax and the product)"
        elif p.get("key_mask") or mask not in ("none", "causal_top_left", "causal_bottom_right"):
            why = f"mask {mask or 'unknown'}: fused only without a mask or with a causal one"
        elif mask == "causal_bottom_right" and p.get("seq") != p.get("kv_seq"):
            why = "bottom-right causal alignment over unequal lengths (SDPA's is_causal is top-left)"
        elif p.get("window", 0):
            why = "a sliding window (SDPA's is_causal has none)"
        if why is not None:
            left.append((what, why))
            continue
        scores, output = products
        q_id, k_t_id = (inputs[scores] + [None, None])[:2]
        v_id = (inputs[output] + [None, None])[1]
        fused.append(Attention(label=f"{names[0]}..{names[-1]}", kind=order[scores][0],
                               scores_call=order[scores][1], output_call=order[output][1], causal=causal,
                               scale=float(p.get("scale", 1.0)), q_shape=_shape(values.get(q_id)),
                               k_t_shape=_shape(values.get(k_t_id)), v_shape=_shape(values.get(v_id))))
    return fused, left


def _random_like(x: Any, generator: torch.Generator) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype.is_floating_point:
        fresh = torch.randn(x.shape, generator=generator, dtype=torch.float32).to(x.device, x.dtype)
        return fresh.requires_grad_(x.requires_grad)
    return x


def _outputs_and_gradients(module: torch.nn.Module, inputs: tuple, seed: int, double: bool) -> list[torch.Tensor]:
    """The module's floating outputs, then the gradients of Σ output·cotangent (cotangents drawn
    from `seed`) with respect to its parameters and the inputs that require grad; float64
    (autocast off) when `double`."""
    params = [p for p in module.parameters() if p.requires_grad]
    if double:
        inputs = tuple(x.detach().double().requires_grad_(x.requires_grad)
                       if isinstance(x, torch.Tensor) and x.dtype.is_floating_point else x for x in inputs)
    device_type = next((x.device.type for x in inputs if isinstance(x, torch.Tensor)), "cpu")
    with torch.random.fork_rng(devices=[x.device for x in inputs if isinstance(x, torch.Tensor)
                                        and x.device.type == "cuda"][:1]), \
            torch.autocast(device_type, enabled=not double and torch.is_autocast_enabled(device_type)):
        torch.manual_seed(seed)
        outs = [o for o in torch.utils._pytree.tree_leaves(module(*inputs))
                if isinstance(o, torch.Tensor) and o.dtype.is_floating_point]
    generator = torch.Generator().manual_seed(seed + 1)
    cotangents = [torch.randn(o.shape, generator=generator).to(o.device, o.dtype) for o in outs]
    wrt = params + [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    grads = torch.autograd.grad([o for o in outs if o.requires_grad],
                                wrt, [c for o, c in zip(outs, cotangents) if o.requires_grad],
                                allow_unused=True) if wrt and any(o.requires_grad for o in outs) else []
    return [o.detach() for o in outs] + [g.detach() if g is not None else torch.zeros_like(w)
                                         for g, w in zip(grads, wrt)]


def _rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return float((a.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def verify_fusion(module: torch.nn.Module, fused: torch.nn.Module, example_inputs: tuple,
                  floor: float = 1e-5) -> tuple[bool, str]:
    """(ok, what was measured): the fused module's outputs and gradients on fresh inputs against
    float64 of the original, within twice the original's own error (at least `floor`)."""
    generator = torch.Generator().manual_seed(20261129)
    inputs = tuple(_random_like(x, generator) for x in example_inputs)
    reference = copy.deepcopy(module).double()
    expected = _outputs_and_gradients(reference, inputs, 7, double=True)
    original = _outputs_and_gradients(module, inputs, 7, double=False)
    candidate = _outputs_and_gradients(fused, inputs, 7, double=False)
    if not (len(expected) == len(original) == len(candidate)):
        return False, "the fused module returned other outputs or gradients"
    worst = (0.0, 0.0)
    for ref, a, b in zip(expected, original, candidate):
        if ref.numel() == 0:
            continue
        e_original, e_fused = _rel_err(a, ref), _rel_err(b, ref)
        if e_fused > max(2.0 * e_original, floor):
            return False, (f"outputs or gradients off: rel_err {e_fused:.2e} against float64, the "
                           f"written-out attention's {e_original:.2e}")
        worst = max(worst, (e_fused, e_original))
    return True, f"outputs and gradients within rel_err {worst[0]:.1e} of float64 (written out: {worst[1]:.1e})"


def fuse_attention_for_training(module: torch.nn.Module, example_inputs: tuple,
                                work_dir: str | Path | None = None) -> tuple[torch.nn.Module, list[str], list[tuple[str, str]]]:
    """`module` with its written-out attentions fused (FusedAttention), or `module` itself when
    there is none to fuse or the fusion fails its check; the notes saying what was fused, and
    (what, why) for what stays written out. Nothing here raises: a capture or engine failure
    leaves the module as it is, with the reason."""
    from fact.compose.planning import plan_and_export  # planning imports compose modules

    try:
        folder, exported = plan_and_export(module, example_inputs, None, work_dir=work_dir,
                                           patterns=["attention"], compile_kernels=False)
        discovery_file, graph_file = Path(folder) / "discovery.json", Path(folder) / "graph.json"
        if exported is None or not discovery_file.is_file() or not graph_file.is_file():
            return module, [], []
        attentions, left = fusable_attentions(json.loads(discovery_file.read_text()),
                                              json.loads(graph_file.read_text()))
    except Exception as error:  # noqa: BLE001 - the module trains as written
        return module, [], [("attention", f"not looked for: {_first_line(error)}")]
    if not attentions:
        return module, [], left
    fused = FusedAttention(module, attentions)
    labels = ", ".join(f"attention at {a.label} ({'causal' if a.causal else 'no mask'}, scale {a.scale:.4g})"
                       for a in attentions)
    try:
        ok, measured = verify_fusion(module, fused, example_inputs)
    except Exception as error:  # noqa: BLE001 - a mismatch or a failing run: written out
        ok, measured = False, f"the fused module failed: {_first_line(error)}"
    if not ok:
        return module, [], left + [(labels, f"kept written out: {measured}")]
    note = (f"{labels}: PyTorch's fused attention (scaled_dot_product_attention) forward and backward "
            f"instead of the written-out products and softmax (FACT's attention kernel has no backward); "
            f"{measured}")
    return fused, [note], left
