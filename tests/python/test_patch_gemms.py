"""Convolutions that are GEMMs (fact.patch_gemms): a 2-D convolution whose kernel equals its
stride is exported as view/permute + linear + a copy in the convolution's layout, giving the same
values, shapes and strides; every other convolution is left as it is; fact.optimize composes the
patch GEMM and, in training, the parameter gradients still match float64 autograd."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

import fact
from compose_testing import needs_engine_plan
from fact import module_state
from fact.patch_gemms import patch_size, rewrite_patch_convolutions

aten = torch.ops.aten


class PatchEmbedding(torch.nn.Module):
    """A ViT's patch embedding and what reads it: conv, flatten, transpose, a linear."""

    def __init__(self, channels=3, width=32, patch=8, bias=True, **conv_options):
        super().__init__()
        self.proj = torch.nn.Conv2d(channels, width, patch, stride=conv_options.pop("stride", patch),
                                    bias=bias, **conv_options)
        self.head = torch.nn.Linear(width, 16)

    def forward(self, image):
        tokens = self.proj(image).flatten(2).transpose(1, 2)
        return self.head(tokens)


class ConvOnly(torch.nn.Module):
    def __init__(self, **conv_options):
        super().__init__()
        self.proj = torch.nn.Conv2d(4, 8, **conv_options)

    def forward(self, image):
        return self.proj(image) * 2


def _targets(program) -> list:
    return [n.target for n in program.graph.nodes if n.op == "call_function"]


def _exported(module, image, **options):
    program, _ = module_state.export_keeping_state(module, (image,), strict=False, **options)
    return program


@pytest.mark.parametrize("size", [(2, 3, 32, 32), (2, 3, 35, 29)])
@pytest.mark.parametrize("bias", [True, False])
def test_patch_convolution_becomes_a_linear_with_the_same_values(size, bias):
    torch.manual_seed(0)
    model = PatchEmbedding(bias=bias).double().eval()
    image = torch.randn(*size, dtype=torch.float64)
    program = _exported(model, image)
    targets = _targets(program)
    assert aten.conv2d.default not in targets and aten.convolution.default not in targets
    assert targets.count(aten.linear.default) == 2
    fresh = torch.randn(*size, dtype=torch.float64)
    torch.testing.assert_close(program.module()(fresh), model(fresh), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_the_result_keeps_the_convolutions_layout(memory_format):
    torch.manual_seed(0)
    model = ConvOnly(kernel_size=4, stride=4).double().to(memory_format=memory_format)
    image = torch.randn(2, 4, 16, 16, dtype=torch.float64).to(memory_format=memory_format)
    program = _exported(model, image)
    assert aten.linear.default in _targets(program)
    want = model(image)
    got = program.module()(image)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert got.stride() == want.stride()


@pytest.mark.parametrize("options", [
    {"kernel_size": 3, "stride": 1},                      # overlapping windows
    {"kernel_size": 4, "stride": 2},                      # stride below the kernel
    {"kernel_size": 4, "stride": 4, "padding": 1},        # padding
    {"kernel_size": 2, "stride": 2, "dilation": 2},       # dilation (stride != reach)
    {"kernel_size": 4, "stride": 4, "groups": 2},         # groups
    {"kernel_size": 1, "stride": 1},                      # a pointwise convolution: 1x1
])
def test_other_convolutions_are_left_alone(options):
    model = ConvOnly(**options).eval()
    program = _exported(model, torch.randn(2, 4, 16, 16))
    assert aten.linear.default not in _targets(program)
    assert [n for n in program.graph.nodes if patch_size(n) is not None] == []


def test_a_symbolic_batch_is_kept():
    torch.manual_seed(0)
    model = PatchEmbedding().double().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    program = _exported(model, torch.randn(3, 3, 32, 32, dtype=torch.float64),
                        dynamic_shapes=({0: batch},))
    assert aten.conv2d.default not in _targets(program)
    for n in (1, 5):
        image = torch.randn(n, 3, 32, 32, dtype=torch.float64)
        torch.testing.assert_close(program.module()(image), model(image), rtol=1e-12, atol=1e-12)


def test_a_graph_output_convolution_is_left_alone():
    model = ConvOnly(kernel_size=4, stride=4)
    model.forward = lambda image: model.proj(image)  # the convolution is the graph's output
    program = _exported(model, torch.randn(2, 4, 16, 16))
    assert aten.linear.default not in _targets(program)
    assert rewrite_patch_convolutions(program.graph_module) == []


@needs_engine_plan
def test_optimize_composes_the_patch_gemm(tmp_path):
    torch.manual_seed(0)
    model = PatchEmbedding(width=64, patch=8).eval()
    image = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        composed = fact.optimize(model, (image,), "strict", work_dir=tmp_path, remainder="eager",
                                 speed_guard=False)
    report = composed.fact_report
    gemm_inputs = [entry for entry in report.composed
                   if any(call.kind.startswith("gemm") for call in entry.calls)]
    assert len(gemm_inputs) == 2, str(report)
    fresh = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        got = composed(fresh)
        want = copy.deepcopy(model).double()(fresh.double())
    error = ((got.double() - want).norm() / want.norm()).item()
    assert error <= 1e-5, error


@needs_engine_plan
def test_training_through_the_patch_gemm_matches_float64_gradients(tmp_path):
    torch.manual_seed(0)
    model = PatchEmbedding(width=64, patch=8)
    original = copy.deepcopy(model)
    image = torch.randn(2, 3, 64, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        composed = fact.optimize(model.train(), (image,), "strict", work_dir=tmp_path,
                                 remainder="eager", speed_guard=False)
    forward_gemms = [entry for entry in composed.fact_report.forward.composed
                     if any(call.kind.startswith("gemm") for call in entry.calls)]
    assert len(forward_gemms) == 2, str(composed.fact_report)
    composed(image).square().mean().backward()
    reference = copy.deepcopy(original).double()
    reference(image.double()).square().mean().backward()
    for (name, got), (_, want) in zip(model.named_parameters(), reference.named_parameters()):
        error = ((got.grad.double() - want.grad).norm() / want.grad.norm()).item()
        assert error <= 1e-5, (name, error)
