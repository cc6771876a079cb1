"""Composed modules that train (docs/compose.md, "Training") on the CPU path: the forward and
the backward graph of AOTAutograd each composed, gradients against float64 autograd of the
original, optimizer steps against the same steps of the original, the saved activations
against eager's, and the cases that decline or refuse (random ops, frozen parameters, inputs
that require grad, double backward, eval mode, a module AOTAutograd cannot trace)."""
from __future__ import annotations

import copy
import importlib.util
import json
import warnings
from pathlib import Path

import pytest
import torch

import fact
from compose_testing import needs_engine_plan
from fact import dynamo_backend
from fact.compose.training_module import TrainingComposedModule
from fact.conformance.corpus import CORPUS_DIR, load_at_cpu_sizes

ROOT = Path(__file__).resolve().parents[2]
STRICT = 1e-5  # docs/architecture.md, precision contract: strict


def _tiny_mlp_module():
    spec = importlib.util.spec_from_file_location("tiny_mlp", ROOT / "bench/models/tiny_mlp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_mlp():
    source = _tiny_mlp_module()
    torch.manual_seed(0)
    model = source.TinyMLP()
    torch.manual_seed(1)
    return model, source.get_inputs()[0]


def corpus_ffn():
    """The corpus' timm Mlp with LayerNorm, GELU and two Dropout(0.1), at its CPU sizes."""
    source = load_at_cpu_sizes(CORPUS_DIR / "mlp_transformer_ffn.py")
    torch.manual_seed(0)
    model = source.Model(*source.get_init_inputs())
    torch.manual_seed(1)
    return model, source.get_inputs()[0]


def loss_of(output: torch.Tensor) -> torch.Tensor:
    return output.square().mean()


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30)).item()


def assert_gradients_match_float64(model: torch.nn.Module, original: torch.nn.Module, x: torch.Tensor):
    """model's parameter gradients (already computed) against float64 autograd of `original`."""
    reference = copy.deepcopy(original).double()
    reference.zero_grad()
    loss_of(reference(x.double())).backward()
    for (name, got), (_, want) in zip(model.named_parameters(), reference.named_parameters()):
        if want.grad is None:
            assert got.grad is None, name
            continue
        assert got.grad is not None, name
        assert rel_err(got.grad, want.grad) <= STRICT, (name, rel_err(got.grad, want.grad))


def train(forward, parameters, x, steps=3, optimizer=torch.optim.AdamW, seed=7):
    opt = optimizer(parameters, lr=1e-2)
    torch.manual_seed(seed)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of(forward(x))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def optimize_for_training(model, x, tmp_path, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the traced signature must never fall back
        return fact.optimize(model.train(), (x,), "strict", work_dir=tmp_path, remainder="eager",
                             speed_guard=False, **options)


def gemms(report) -> list[str]:
    return [call.kind for entry in report.composed for call in entry.calls]


# --- fact.optimize ---------------------------------------------------------------------------


@needs_engine_plan
def test_tiny_mlp_composes_both_graphs_and_its_gradients_match_float64(tmp_path):
    model, x = tiny_mlp()
    original = copy.deepcopy(model)
    composed = optimize_for_training(model, x, tmp_path)
    assert isinstance(composed, TrainingComposedModule)
    report = composed.fact_report
    # forward: fc GEMM + bias (its output is saved for gelu's backward) and proj + bias + residual;
    # backward: the dgrad GEMM (grad @ W) with gelu's derivative over the saved pre-activation in
    # its epilogue, and the two wgrad GEMMs (grad^T @ activation)
    assert report.forward.graph == "forward" and report.backward.graph == "backward"
    assert len(report.forward.composed) == 2 and all(c.verified for c in report.forward.composed), str(report)
    assert len(report.backward.composed) == 3 and all(c.verified for c in report.backward.composed), str(report)
    assert gemms(report.backward) == ["gemm"] * 3, str(report)
    assert sorted(c.rule for c in report.backward.composed) == ["gemm", "gemm", "gemm_gelu_tanh_grad"], str(report)
    assert all(c.rel_err <= STRICT for c in report.backward.composed), str(report)
    assert (tmp_path / "forward" / "plan.json").exists() and (tmp_path / "backward" / "plan.json").exists()
    launches = [n for n in composed.graphs["backward"].graph_module.graph.nodes
                if n.target is torch.ops.fact.launch.default]
    assert len(launches) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss_of(composed(x)).backward()
    assert_gradients_match_float64(model, original, x)


@needs_engine_plan
def test_adamw_steps_update_the_original_parameters_like_eager(tmp_path):
    model, x = tiny_mlp()
    twin = copy.deepcopy(model)
    composed = optimize_for_training(model, x, tmp_path)
    assert [id(p) for p in composed.parameters()] == [id(p) for p in model.parameters()]
    before = model.fc.weight.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = train(composed, model.parameters(), x, steps=4)
    want = train(twin, twin.parameters(), x, steps=4)
    assert not torch.equal(before, model.fc.weight), "the optimizer must update what the module uses"
    assert got[-1] < got[0], got
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
    for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
        assert rel_err(p, q) <= STRICT, name


@needs_engine_plan
def test_sgd_steps_through_the_corpus_ffn_keep_dropout_in_pytorch(tmp_path):
    """Dropout(0.1) in training: the random ops stay PyTorch's (listed with the reason, in no
    replacement), the backward's dead copy of the forward dropout is removed, so the random
    stream is eager's and the losses are the same step for step; the GEMMs of both graphs
    compose."""
    model, x = corpus_ffn()
    twin = copy.deepcopy(model)
    composed = optimize_for_training(model, x, tmp_path)
    report = composed.fact_report
    random = [item for item in report.forward.left_to_pytorch if item.stage == "random"]
    assert len(random) == 2 and all("native_dropout" in item.what for item in random), str(report)
    assert all("random op" in item.reason for item in random)
    for graph in (report.forward, report.backward):
        assert all(not any("dropout" in node for node in entry.nodes) for entry in graph.composed), str(graph)
    assert len(report.forward.composed) == 2 and len(report.backward.composed) == 4, str(report)
    assert not any(n.target is torch.ops.aten.native_dropout.default
                   for n in composed.graphs["backward"].graph_module.graph.nodes)
    got = train(composed, model.parameters(), x, optimizer=torch.optim.SGD)
    want = train(twin, twin.parameters(), x, optimizer=torch.optim.SGD)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)


@needs_engine_plan
def test_the_saved_activations_are_no_more_than_eager(tmp_path):
    model, x = tiny_mlp()
    composed = optimize_for_training(model, x, tmp_path)
    owned = {t.untyped_storage().data_ptr() for t in [x, *model.parameters()]}

    def saved_bytes(forward) -> int:
        storages = {}

        def pack(tensor):
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in owned:
                storages[storage.data_ptr()] = storage.nbytes()
            return tensor
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss_of(forward(x))
        return sum(storages.values())

    eager, composed_bytes = saved_bytes(model), saved_bytes(composed)
    assert eager > 0 and 0 < composed_bytes <= eager, (composed_bytes, eager)


@needs_engine_plan
def test_frozen_parameters_get_no_gradient_and_the_others_match(tmp_path):
    model, x = tiny_mlp()
    model.fc.weight.requires_grad_(False)
    original = copy.deepcopy(model)
    composed = optimize_for_training(model, x, tmp_path)
    assert composed.fact_report.backward.composed, str(composed.fact_report)
    loss_of(composed(x)).backward()
    assert model.fc.weight.grad is None
    assert_gradients_match_float64(model, original, x)


@needs_engine_plan
def test_a_parameter_frozen_after_composing_runs_the_original(tmp_path):
    model, x = tiny_mlp()
    original = copy.deepcopy(model)
    composed = optimize_for_training(model, x, tmp_path)
    model.proj.weight.requires_grad_(False)
    original.proj.weight.requires_grad_(False)
    with pytest.warns(UserWarning, match="differ from when it was traced"):
        loss_of(composed(x)).backward()
    assert model.proj.weight.grad is None
    assert_gradients_match_float64(model, original, x)


@needs_engine_plan
def test_an_input_that_requires_grad_gets_its_gradient(tmp_path):
    """An eval-mode module given an input that requires grad composes for training too."""
    model, x = tiny_mlp()
    model.eval().requires_grad_(False)
    x = x.clone().requires_grad_(True)
    composed = fact.optimize(model, (x,), "strict", work_dir=tmp_path, remainder="eager", speed_guard=False)
    assert isinstance(composed, TrainingComposedModule)
    assert composed.fact_report.backward.composed, str(composed.fact_report)
    loss_of(composed(x)).backward()
    reference = x.detach().double().requires_grad_(True)
    loss_of(copy.deepcopy(model).double()(reference)).backward()
    assert rel_err(x.grad, reference.grad) <= STRICT


@needs_engine_plan
def test_double_backward_is_refused_with_a_clear_error(tmp_path):
    model, x = tiny_mlp()
    composed = optimize_for_training(model, x, tmp_path)
    loss = loss_of(composed(x))
    with pytest.raises(RuntimeError, match="double backward through fact::launch is not supported"):
        torch.autograd.grad(loss, [model.fc.weight], create_graph=True)


@needs_engine_plan
def test_eval_mode_and_another_shape_run_the_original(tmp_path):
    model, x = corpus_ffn()
    composed = optimize_for_training(model, x, tmp_path)
    composed.eval()
    with pytest.warns(UserWarning, match="training flags"), torch.no_grad():
        torch.testing.assert_close(composed(x), model(x), rtol=0, atol=0)
    composed.train()
    other = torch.randn(1, *x.shape[1:])
    with pytest.warns(UserWarning, match="outside the plan"):
        loss_of(composed(other)).backward()
    assert model.mlp.fc1.weight.grad is not None


@needs_engine_plan
def test_the_report_says_what_each_graph_composed(tmp_path):
    model, x = tiny_mlp()
    composed = optimize_for_training(model, x, tmp_path)
    report = composed.fact_report
    text = str(report)
    assert "in the forward graph" in text and "in the backward graph" in text
    assert "backward graph: FACT composition (strict, cpu, backward graph)" in text
    document = json.loads(json.dumps(report.to_json()))
    assert document["forward"]["graph"] == "forward" and len(document["backward"]["composed"]) == 3


def test_no_grad_and_training_false_keep_the_inference_path():
    model, x = tiny_mlp()
    with torch.no_grad():
        composed = fact.optimize(model.train(), (x,), remainder="eager", speed_guard=False)
    assert not isinstance(composed, TrainingComposedModule)
    composed = fact.optimize(model.train(), (x,), remainder="eager", speed_guard=False, training=False)
    assert not isinstance(composed, TrainingComposedModule)
    assert composed.fact_report.forward is None and composed.fact_report.backward is None


@needs_engine_plan
def test_an_inference_composition_run_with_grad_says_how_to_train():
    model, x = tiny_mlp()
    composed = fact.optimize(model.train(), (x,), "strict", remainder="eager", speed_guard=False,
                             training=False)
    assert composed.fact_report.composed, str(composed.fact_report)
    with pytest.raises(RuntimeError, match="fact::launch has no backward.*model.train"):
        loss_of(composed(x)).backward()


def test_a_module_aot_autograd_cannot_trace_trains_as_the_original():
    class DataDependent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.linear(x) if x.sum() > 0 else x - 1

    model, x = DataDependent(), torch.ones(4, 8)
    composed = fact.optimize(model.train(), (x,), remainder="eager")
    assert composed.graph_module is None and not isinstance(composed, TrainingComposedModule)
    [item] = composed.fact_report.left_to_pytorch
    assert item.what == "module" and "cannot be exported for training" in item.reason
    loss_of(composed(x)).backward()
    assert model.linear.weight.grad is not None


# --- torch.compile(backend="fact") ---------------------------------------------------------------


@needs_engine_plan
def test_torch_compile_backend_trains_with_both_graphs_composed(tmp_path):
    model, x = tiny_mlp()
    twin, original = copy.deepcopy(model), copy.deepcopy(model)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend="fact", options={"precision": "strict",
                                                                  "work_dir": str(tmp_path)})
        loss_of(compiled(x)).backward()
        forward, backward = dynamo_backend.reports[-2:]
        assert (forward.graph, backward.graph) == ("forward", "backward")
        assert len(forward.composed) == 2 and len(backward.composed) == 3, f"{forward}\n{backward}"
        assert all(c.verified for c in backward.composed), str(backward)
        assert_gradients_match_float64(model, original, x)
        model.zero_grad()
        got = train(compiled, model.parameters(), x, optimizer=torch.optim.SGD)
        want = train(twin, twin.parameters(), x, optimizer=torch.optim.SGD)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
        assert dynamo_backend.reports[-1] is backward, "the steps must not compile again"
    finally:
        torch._dynamo.reset()


@needs_engine_plan
def test_torch_compile_backend_under_no_grad_keeps_the_inference_path(tmp_path):
    model, x = tiny_mlp()
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend="fact", options={"precision": "strict",
                                                                  "work_dir": str(tmp_path)})
        with torch.no_grad():
            got = compiled(x)
        report = dynamo_backend.reports[-1]
        assert report.graph == "" and report.forward is None and report.composed, str(report)
        with torch.no_grad():
            torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    finally:
        torch._dynamo.reset()


@needs_engine_plan
def test_bf16_swiglu_trains_as_separate_gemms_without_derived_operands(tmp_path):
    """For inference the bf16 SwiGLU is one glu GEMM over weights interleaved once (a derived
    operand); in training the weights change every step and are graph inputs: plain GEMMs in
    both graphs, no derived operand, gradients within bf16's bound of float64."""
    from test_compose import LlamaMLP

    torch.manual_seed(0)
    model = LlamaMLP(64, 160).to(torch.bfloat16)
    original = copy.deepcopy(model)
    x = torch.randn(2, 8, 64, dtype=torch.bfloat16)
    composed = fact.optimize(model.train(), (x,), "native", work_dir=tmp_path, remainder="eager",
                             speed_guard=False)
    report = composed.fact_report
    for graph in (report.forward, report.backward):
        assert graph.composed and all(c.verified and not c.derived for c in graph.composed), str(report)
        assert set(gemms(graph)) == {"gemm"}, str(report)
    loss_of(composed(x).float()).backward()
    reference = copy.deepcopy(original).double()
    loss_of(reference(x.double())).backward()
    for (name, got), (_, want) in zip(model.named_parameters(), reference.named_parameters()):
        assert rel_err(got.grad, want.grad) <= 3e-2, (name, rel_err(got.grad, want.grad))


@needs_engine_plan
def test_batchnorm_running_statistics_are_written_back_like_eager(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 16))
    twin = copy.deepcopy(model)
    x = torch.randn(16, 32)
    composed = optimize_for_training(model, x, tmp_path)
    assert composed.fact_report.backward.composed, str(composed.fact_report)
    for _ in range(3):
        loss_of(composed(x)).backward()
        loss_of(twin(x)).backward()
    norm, norm_twin = model[1], twin[1]
    assert norm.num_batches_tracked.item() == norm_twin.num_batches_tracked.item() == 3
    torch.testing.assert_close(norm.running_mean, norm_twin.running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(norm.running_var, norm_twin.running_var, rtol=1e-5, atol=1e-6)
    # the first Linear's bias gradient is zero up to rounding (BatchNorm removes the mean)
    for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


@needs_engine_plan
def test_bf16_autocast_composes_bf16_gemms_over_float32_master_weights(tmp_path):
    """Composed under torch.autocast (float32 parameters): the traced graphs hold autocast's
    casts, so both graphs compose bf16 GEMMs; the gradients (float32, on the float32
    parameters) are as close to float64 as eager autocast's, AdamW steps follow eager autocast's,
    and a call outside autocast runs the original (the graphs assume it), with a warning."""
    model, x = tiny_mlp()
    twin, original = copy.deepcopy(model), copy.deepcopy(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        composed = fact.optimize(model.train(), (x,), "native", work_dir=tmp_path, remainder="eager",
                                 speed_guard=False)
    report = composed.fact_report
    assert isinstance(composed, TrainingComposedModule)
    for graph in (report.forward, report.backward):
        assert graph.composed and all(c.verified for c in graph.composed), str(report)
        assert all("bfloat16" in call.summary for c in graph.composed for call in c.calls), str(report)
    with torch.autocast("cpu", dtype=torch.bfloat16), warnings.catch_warnings():
        warnings.simplefilter("error")
        loss_of(composed(x)).backward()
        loss_of(twin(x)).backward()
    reference = copy.deepcopy(original).double()
    loss_of(reference(x.double())).backward()
    for (name, got), (_, eager), (_, want) in zip(model.named_parameters(), twin.named_parameters(),
                                                  reference.named_parameters()):
        assert got.grad.dtype == torch.float32, name
        assert rel_err(got.grad, want.grad) <= 2 * rel_err(eager.grad, want.grad) + 1e-3, name
    model.zero_grad(), twin.zero_grad()

    def under_autocast(module):  # autocast around the forward only, as its documentation asks
        def forward(inputs):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return module(inputs)
        return forward
    got = train(under_autocast(composed), model.parameters(), x, steps=4)
    want = train(under_autocast(twin), twin.parameters(), x, steps=4)
    assert got[-1] < got[0], got
    torch.testing.assert_close(got, want, rtol=2e-3, atol=0)
    with pytest.warns(UserWarning, match="autocast state"), torch.no_grad():
        torch.testing.assert_close(composed(x), model(x), rtol=0, atol=0)


# --- the memory rule: no more saved activations than the original -----------------------------


class CheckpointedStack(torch.nn.Module):
    """Two GELU MLP blocks, each run under torch.utils.checkpoint (non-reentrant, as
    `transformers`' gradient_checkpointing_enable() runs its layers) when `checkpointed`."""

    def __init__(self, checkpointed: bool):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 64))
            for _ in range(2))
        self.checkpointed = checkpointed

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x


def _saved_bytes(model, x) -> int:
    from fact.compose.training_memory import saved_activation_bytes
    owned = {t.untyped_storage().data_ptr() for t in [x, *model.parameters()]}
    return saved_activation_bytes(model, (x,), owned)


@needs_engine_plan
def test_gradient_checkpointing_trains_the_original_with_the_reason(tmp_path):
    """The traced graphs would save the activations the checkpointed regions recompute (AOT's
    partitioner does not keep torch.utils.checkpoint's recomputation): the composed module
    would need more activation memory than eager, so the original trains, with both sizes in
    the report. Without checkpointing the same stack composes."""
    torch.manual_seed(0)
    model = CheckpointedStack(checkpointed=True).train()
    twin = copy.deepcopy(model)
    x = torch.randn(128, 64)  # 0.5 MiB per hidden activation
    composed = optimize_for_training(model, x, tmp_path / "ckpt")
    report = composed.fact_report
    assert report.runs == "the original eagerly", report.runs
    [memory] = [item for item in report.left_to_pytorch if item.stage == "memory"]
    assert "gradient checkpointing" in memory.reason and "MiB" in memory.reason, memory.reason
    assert _saved_bytes(composed, x) == _saved_bytes(twin, x)
    assert train(composed, model.parameters(), x) == train(twin, twin.parameters(), x)

    plain = CheckpointedStack(checkpointed=False).train()
    composed_plain = optimize_for_training(plain, x, tmp_path / "plain")
    assert isinstance(composed_plain, TrainingComposedModule), composed_plain.fact_report.runs
    assert not [item for item in composed_plain.fact_report.left_to_pytorch if item.stage == "memory"]


class NormDropClamp(torch.nn.Module):
    """A forward that writes state: BatchNorm's running statistics, a parameter clamped in
    place, and a dropout that draws from the generator."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)
        self.norm = torch.nn.BatchNorm1d(32)
        self.scale = torch.nn.Parameter(torch.full((32,), 3.0))
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        with torch.no_grad():
            self.scale.clamp_(max=2.0)
        return self.drop(self.norm(self.linear(x))) * self.scale


def test_the_memory_check_leaves_the_module_and_the_generator_as_they_were():
    """activation_memory_refusal runs two forwards; the running statistics, the parameter a
    forward writes and the random stream are as before it."""
    from fact.compose.training_memory import activation_memory_refusal
    torch.manual_seed(0)
    model = NormDropClamp().train()
    x = torch.randn(8, 32)
    before = {name: t.detach().clone() for name, t in [*model.named_parameters(), *model.named_buffers()]}
    rng = torch.random.get_rng_state()
    assert activation_memory_refusal(model, copy.deepcopy(model), (x,)) is None
    assert torch.equal(torch.random.get_rng_state(), rng)
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        assert torch.equal(t, before[name]), name
    assert model.scale.grad is None and model.linear.weight.grad is None


class ClampsItsScale(torch.nn.Module):
    """A forward that writes one of its parameters in place (a clamp under no_grad, as weight
    constraints are written) before using it."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)
        self.scale = torch.nn.Parameter(torch.full((32,), 3.0))

    def forward(self, x):
        with torch.no_grad():
            self.scale.clamp_(0.5, 2.0)
        return self.fc2(torch.relu(self.fc1(x))) * self.scale


@needs_engine_plan
def test_a_parameter_written_in_place_by_the_forward_trains_like_eager(tmp_path):
    """AOTAutograd functionalizes the write and copies it back to the parameter: the composed
    module clamps the same parameter object, and three AdamW steps give eager's losses and
    parameters."""
    torch.manual_seed(0)
    model = ClampsItsScale().train()
    twin = copy.deepcopy(model)
    x = torch.randn(16, 32)
    composed = optimize_for_training(model, x, tmp_path)
    assert isinstance(composed, TrainingComposedModule), composed.fact_report.runs
    assert composed.fact_report.forward.composed, str(composed.fact_report)
    got = train(composed, model.parameters(), x)
    want = train(twin, twin.parameters(), x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
    assert float(model.scale.max()) <= 2.0
    for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
