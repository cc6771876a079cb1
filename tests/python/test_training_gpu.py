"""Training through FACT on a CUDA GPU (skipped elsewhere; docs/compose.md, "Training"): the
TinyMLP (bench/models/tiny_mlp.py) composed for training in `strict` float32 (TF32 off), its
forward and backward graphs running the engine's CUDA kernels (built with nvcc on first use,
as in test_compose_gpu.py's engine tests), parameter gradients against float64 autograd of the
original and AdamW steps against eager's; then the same module under bf16 autocast with
float32 master weights (`native`). Each case composes once (kernel builds dominate the time)."""
import copy
import importlib.util
import warnings
from pathlib import Path

import pytest
import torch

import fact
from fact.compose.training_module import TrainingComposedModule
from test_compose_plan import needs_engine_plan

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (GPU tests run on the device host)"),
]

ROOT = Path(__file__).resolve().parents[2]
STRICT = 1e-5  # docs/architecture.md, precision contract: strict
BF16 = torch.bfloat16


def tiny_mlp():
    """TinyMLP (embed 128, hidden 512) on the GPU, float32, and an input of its shape."""
    spec = importlib.util.spec_from_file_location("tiny_mlp", ROOT / "bench/models/tiny_mlp.py")
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    torch.manual_seed(0)
    model = source.TinyMLP().cuda().train()
    torch.manual_seed(1)
    return model, source.get_inputs(device="cuda")[0]


def loss_of(output: torch.Tensor) -> torch.Tensor:
    return output.float().square().mean()


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30)).item()


def forward_under(module, autocast: bool):
    """module's forward, under bf16 autocast when asked (around the forward only: autocast
    caches its casts of the weights until its context exits)."""
    def forward(x):
        if not autocast:
            return module(x)
        with torch.autocast("cuda", dtype=BF16):
            return module(x)
    return forward


def adamw_losses(forward, parameters, x, steps=4) -> list[float]:
    opt = torch.optim.AdamW(parameters, lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(forward(x))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def float64_gradients(original: torch.nn.Module, x: torch.Tensor) -> dict:
    reference = copy.deepcopy(original).double()
    loss_of(reference(x.double())).backward()
    return {name: p.grad for name, p in reference.named_parameters()}


def assert_kernels(report) -> None:
    """Both graphs composed something, every replacement a verified CUDA kernel within its
    tolerance."""
    assert isinstance(report.forward, type(report)) and isinstance(report.backward, type(report)), str(report)
    for graph in (report.forward, report.backward):
        assert graph.composed, str(report)
        for entry in graph.composed:
            assert entry.implementation == "kernels" and entry.verified, str(report)
            assert entry.rel_err <= entry.tolerance, str(report)
            assert all(call.kernel for call in entry.calls), str(report)


@pytest.fixture
def no_tf32():
    """PyTorch's float32 default (TF32 off) for eager and the float64 comparison."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@needs_engine_plan
def test_strict_float32_training_runs_cuda_kernels_in_both_graphs(tmp_path, no_tf32):
    model, x = tiny_mlp()
    twin, original = copy.deepcopy(model), copy.deepcopy(model)
    composed = fact.optimize(model, (x,), "strict", work_dir=tmp_path, remainder="eager",
                             speed_guard=False, strict=True)
    assert isinstance(composed, TrainingComposedModule), str(composed.fact_report)
    report = composed.fact_report
    assert_kernels(report)
    assert all(entry.tolerance <= STRICT for graph in (report.forward, report.backward)
               for entry in graph.composed), str(report)
    launches = [n for n in composed.graphs["backward"].graph_module.graph.nodes
                if n.target is torch.ops.fact.launch.default]
    assert launches, str(report.backward)

    fresh = torch.randn_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the traced signature must never fall back
        loss_of(composed(fresh)).backward()
    want = float64_gradients(original, fresh)
    for name, p in model.named_parameters():
        assert rel_err(p.grad, want[name]) <= STRICT, (name, rel_err(p.grad, want[name]))
    model.zero_grad(set_to_none=True)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = adamw_losses(composed, model.parameters(), x)
    expected = adamw_losses(twin, twin.parameters(), x)
    assert got[-1] < got[0], got
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=0)
    for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
        assert rel_err(p, q) <= STRICT, name


@needs_engine_plan
def test_bf16_autocast_training_runs_bf16_kernels_over_float32_weights(tmp_path):
    """Composed under torch.autocast("cuda", bfloat16): the graphs hold autocast's casts, so
    both compose bf16 GEMMs; the float32 parameters get float32 gradients as close to float64
    as eager autocast's, AdamW steps follow eager autocast's, and a call outside autocast runs
    the original module (the graphs assume autocast), with a warning."""
    model, x = tiny_mlp()
    twin, original = copy.deepcopy(model), copy.deepcopy(model)
    with torch.autocast("cuda", dtype=BF16):
        composed = fact.optimize(model, (x,), "native", work_dir=tmp_path, remainder="eager",
                                 speed_guard=False, strict=True)
    assert isinstance(composed, TrainingComposedModule), str(composed.fact_report)
    report = composed.fact_report
    assert_kernels(report)
    assert all("bfloat16" in call.summary for graph in (report.forward, report.backward)
               for entry in graph.composed for call in entry.calls), str(report)

    fresh = torch.randn_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss_of(forward_under(composed, True)(fresh)).backward()
    loss_of(forward_under(twin, True)(fresh)).backward()
    want = float64_gradients(original, fresh)
    for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
        assert p.grad.dtype == torch.float32, name
        assert rel_err(p.grad, want[name]) <= 2 * rel_err(q.grad, want[name]) + 1e-3, name
    model.zero_grad(set_to_none=True)
    twin.zero_grad(set_to_none=True)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = adamw_losses(forward_under(composed, True), model.parameters(), x)
    expected = adamw_losses(forward_under(twin, True), twin.parameters(), x)
    assert got[-1] < got[0], got
    torch.testing.assert_close(got, expected, rtol=5e-3, atol=0)

    with pytest.warns(UserWarning, match="autocast state"), torch.no_grad():
        torch.testing.assert_close(composed(x), model(x), rtol=0, atol=0)


@needs_engine_plan
def test_cuda_graphs_replay_both_graphs_and_train_like_without(tmp_path, no_tf32):
    """cuda_graphs=True: the forward and backward graphs replay through CUDA graph trees; AdamW
    steps give the losses and parameters of the same composition without graphs (and eager's
    within the strict contract); an output kept past the next step's forward is refused, as
    under torch.compile's "reduce-overhead"."""
    model, x = tiny_mlp()
    plain_model = copy.deepcopy(model)
    twin = copy.deepcopy(model)
    graphed = fact.optimize(model, (x,), "strict", work_dir=tmp_path / "graphed", remainder="eager",
                            speed_guard=False, strict=True, cuda_graphs=True)
    plain = fact.optimize(plain_model, (x,), "strict", work_dir=tmp_path / "plain", remainder="eager",
                          speed_guard=False, strict=True)
    line = graphed.fact_report.cuda_graphs
    assert line.startswith("on (CUDA graph trees: the forward and backward graphs replayed"), line
    got = adamw_losses(graphed, model.parameters(), x, steps=6)
    want = adamw_losses(plain, plain_model.parameters(), x, steps=6)
    eager = adamw_losses(twin, twin.parameters(), x, steps=6)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    torch.testing.assert_close(got, eager, rtol=1e-5, atol=0)
    for (name, p), (_, q) in zip(model.named_parameters(), plain_model.named_parameters()):
        assert rel_err(p, q) <= 1e-6, name
    kept = graphed(x)
    loss_of(kept).backward()
    loss_of(graphed(x)).backward()
    with pytest.raises(RuntimeError, match="overwritten"):
        kept.sum().item()


def llama_block():
    """bench/models/llama_block.py's block, small, on the GPU: its attention is written out
    (q·kᵀ, a causal buffer mask, softmax in float32, ·v)."""
    spec = importlib.util.spec_from_file_location("llama_block", ROOT / "bench/models/llama_block.py")
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    torch.manual_seed(0)
    model = source.LlamaDecoderBlock(hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512,
                                     max_seq_len=256).cuda().train()
    torch.manual_seed(1)
    return model, torch.randn(2, 256, 256, device="cuda")


@needs_engine_plan
def test_a_written_out_attention_trains_as_pytorchs_fused_attention(tmp_path):
    """Under bf16 autocast the Llama block's written-out attention is traced as PyTorch's fused
    attention (its forward graph holds no softmax); its gradients are as close to float64 as
    eager autocast's, and AdamW steps follow eager autocast's. (patterns=["attention"]: no GEMM
    is compiled, the attention alone is under test.)"""
    model, x = llama_block()
    twin, original = copy.deepcopy(model), copy.deepcopy(model)
    with torch.autocast("cuda", dtype=BF16):
        composed = fact.optimize(model, (x,), "native", work_dir=tmp_path, remainder="eager",
                                 speed_guard=False, strict=True, patterns=["attention"])
    assert isinstance(composed, TrainingComposedModule), str(composed.fact_report)
    notes = " ".join(composed.fact_report.notes)
    assert "PyTorch's fused attention" in notes, notes
    code = composed.graphs["forward"].original.code
    assert "scaled_dot_product" in code and "softmax" not in code, code

    fresh = torch.randn_like(x)
    loss_of(forward_under(composed, True)(fresh)).backward()
    loss_of(forward_under(twin, True)(fresh)).backward()
    want = float64_gradients(original, fresh)
    for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
        assert rel_err(p.grad, want[name]) <= 2 * rel_err(q.grad, want[name]) + 1e-3, name
    model.zero_grad(set_to_none=True)
    twin.zero_grad(set_to_none=True)
    got = adamw_losses(forward_under(composed, True), model.parameters(), x)
    expected = adamw_losses(forward_under(twin, True), twin.parameters(), x)
    assert got[-1] < got[0], got
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=0)


@needs_engine_plan
def test_strict_training_over_declared_ranges_runs_cuda_kernels_at_every_size(tmp_path, no_tf32):
    """One module composed over batch x seq ranges: at sizes it was not traced at, its forward
    and backward graphs run FACT's CUDA kernels (a launch is in each graph) without falling back,
    and the parameter gradients are within `strict` of float64 autograd of the original."""
    from fact.compose.training_over_ranges import RangeTrainingComposedModule
    from fact.dynamic_ranges import Range

    model, x = tiny_mlp()
    original = copy.deepcopy(model)
    shapes = ({0: Range("batch", 1, 16), 1: Range("seq", 8, 256, multiple=8)},)
    composed = fact.optimize(model, (x,), "strict", work_dir=tmp_path, remainder="eager",
                             speed_guard=False, dynamic_shapes=shapes)
    assert isinstance(composed, RangeTrainingComposedModule), str(composed.fact_report)
    report = composed.fact_report
    assert_kernels(report)
    for which in ("forward", "backward"):
        launches = [n for n in composed.graphs[which].graph_module.graph.nodes
                    if n.target is torch.ops.fact.launch.default]
        assert launches and report.forward.symbols, str(report)
    for shape in [(3, 72, 128), (16, 256, 128), (1, 8, 128)]:
        fresh = torch.randn(*shape, device="cuda")
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # inside the ranges: never the original
            loss_of(composed(fresh)).backward()
        want = float64_gradients(original, fresh)
        for name, p in model.named_parameters():
            assert rel_err(p.grad, want[name]) <= STRICT, (shape, name, rel_err(p.grad, want[name]))
        model.zero_grad(set_to_none=True)
