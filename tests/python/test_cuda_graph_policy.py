"""When the composed forward may run as a CUDA graph (fact.compose.guards.graphs_unsafe): never
when the forward writes one of its inputs (a graph would write the static copies instead), by
an in-place op on the input or on a view of it; writes to its own intermediates are fine. And
on the CPU the default reports graphs off with the reason."""
import torch

import fact
from fact.compose.guards import graphs_unsafe


class WritesAViewOfItsInput(torch.nn.Module):
    def forward(self, x, z):
        y = 2.0 * x + 3.0 * z
        x.view(-1).add_(1.0)
        return torch.relu(y)


class WritesItsInput(torch.nn.Module):
    def forward(self, x, z):
        z.mul_(2.0)
        return x + z


class WritesItsIntermediate(torch.nn.Module):
    def forward(self, x, z):
        y = 2.0 * x + 3.0 * z
        y.add_(1.0)
        return torch.relu(y)


def _exported(module):
    return torch.export.export(module, (torch.randn(4, 4), torch.randn(4, 4)))


def test_a_forward_writing_its_input_or_a_view_of_it_is_unsafe():
    assert graphs_unsafe(_exported(WritesAViewOfItsInput())).startswith("the forward writes its input(s) x;")
    assert graphs_unsafe(_exported(WritesItsInput())).startswith("the forward writes its input(s) z;")


def test_writes_to_intermediates_are_safe():
    assert graphs_unsafe(_exported(WritesItsIntermediate())) == ""


def test_a_functionalized_input_mutation_is_unsafe():
    exported = _exported(WritesItsInput()).run_decompositions()
    assert exported.graph_signature.user_inputs_to_mutate, exported.graph_signature
    assert graphs_unsafe(exported).startswith("the forward writes its input(s) z;")


def test_a_short_or_host_bound_call_is_captured_a_device_bound_one_is_not():
    from fact.compose.shape_graphs import worth_capturing
    # under 2 ms on the device: launch latency dominates, always captured
    assert worth_capturing(device_ms=0.3, host_ms=0.1, output_bytes=0)
    # the host's launches (nearly) bound the call: captured
    assert worth_capturing(device_ms=3.0, host_ms=6.0, output_bytes=1 << 20)
    assert worth_capturing(device_ms=6.7, host_ms=4.0, output_bytes=25_000_000)
    # bound by the device's work: not captured
    assert not worth_capturing(device_ms=5.2, host_ms=2.0, output_bytes=0)
    # near the bound, but copying 823 MB of outputs out of the graph would cost 5% and more
    assert not worth_capturing(device_ms=5.2, host_ms=5.6, output_bytes=823_000_000)
    # short, but its 823 MB of logits take longer to copy out than the call itself saves
    assert not worth_capturing(device_ms=0.96, host_ms=0.05, output_bytes=823_000_000)
    # short and host-bound: a copy of its outputs costs less than the host time a graph saves
    assert worth_capturing(device_ms=0.02, host_ms=0.1, output_bytes=4_000_000)
