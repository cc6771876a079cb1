"""The seed and offset a fused attention saves for its backward are 0-dim tensors whose device
PyTorch chooses at run time (memory-efficient attention: on the CPU, or on the GPU while a CUDA
graph is captured) and the traced backward graph may state another: a composed graph's signature
leaves their device out when only PyTorch's random ops read them (fact.compose.training.
random_op_scalars, ComposedModule.allow_any_device). Without it a composed backward ran the
original backward graph at every step, its kernels unused (float32 minGPT on an H200)."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from fact.compose.module import ComposedModule
from fact.report import FactReport
from fact.compose.signature import _signature
from fact.compose.training import random_op_scalars


def graph_with_a_seeded_op():
    """x, p (0-dim, read by bernoulli only), scale (0-dim, read by a multiply)."""
    def f(x, p, scale):
        return torch.ops.aten.bernoulli.Tensor(x, p) * scale
    example = (torch.rand(4, 3), torch.tensor(0.5), torch.tensor(2.0))
    return make_fx(f)(*example), example


def test_only_0_dim_inputs_that_random_ops_alone_read_are_device_free():
    graph_module, _ = graph_with_a_seeded_op()
    assert random_op_scalars(graph_module) == frozenset({1})


def test_a_device_free_input_matches_on_another_device_and_the_rest_still_must():
    graph_module, example = graph_with_a_seeded_op()
    composed = ComposedModule(graph_module, graph_module, _signature(example), FactReport(precision="strict", device="cpu"))
    composed.allow_any_device(random_op_scalars(graph_module), example)
    on_meta = (example[0], example[1].to("meta"), example[2])
    assert _signature(on_meta, composed.device_free_inputs) == composed.planned_signature
    scale_on_meta = (example[0], example[1], example[2].to("meta"))
    assert _signature(scale_on_meta, composed.device_free_inputs) != composed.planned_signature
    other_shape = (example[0], torch.rand(2), example[2])
    assert _signature(other_shape, composed.device_free_inputs) != composed.planned_signature
    # Nothing device-free: the planned signature is left as it was.
    plain = ComposedModule(graph_module, graph_module, _signature(example), FactReport(precision="strict", device="cpu"))
    plain.allow_any_device(frozenset(), example)
    assert plain.planned_signature == _signature(example)
    assert _signature(on_meta) != plain.planned_signature
