"""The memory rule of a module composed for training: its forward saves no more activations for
the backward than the original saves eagerly (docs/compose.md, "Training").

AOTAutograd's partitioner decides what the composed forward saves. It does not see what the
original does about memory at run time: gradient checkpointing (torch.utils.checkpoint, what
`transformers`' gradient_checkpointing_enable() turns on) saves only each checkpointed region's
inputs and recomputes the rest in the backward, while the traced graphs save the activations
inside the regions. `activation_memory_refusal` runs one forward of each, on the example
inputs, and counts the bytes each saves for the backward; a composed module that saves more
than ACTIVATION_SLACK times the original's (plus SLACK_BYTES) is refused with both sizes, and
the original trains.

The two forwards leave the module as they found it: the random number generators of the CPU
and of the inputs' CUDA devices are forked (a dropout draws what it would have drawn without
them), the module's state is put back as fact.module_state.preserved_state puts it back (running
statistics and other buffers, plain tensor attributes), and the parameters' values too (a
parameter clamped in place), from a copy in host memory. No backward runs: no gradient is
touched.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import torch

from fact.module_state import preserved_state

ACTIVATION_SLACK = 1.05     # training's memory contract: eager's activation memory + 5% at most
SLACK_BYTES = 64 * 1024     # below this, a difference is bookkeeping (a scalar, a shape tensor)


def saved_activation_bytes(forward: Callable[..., Any], inputs: Sequence[Any], owned: set[int]) -> int:
    """The bytes of the distinct storages one call of `forward(*inputs)` saves for its
    backward (torch.autograd.graph.saved_tensors_hooks), leaving out the storages in `owned`
    (the inputs, parameters and buffers: they exist whether or not anything is saved)."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer not in owned:
            storages[pointer] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        outputs = forward(*inputs)
    del outputs
    return sum(storages.values())


@contextlib.contextmanager
def state_kept(module: torch.nn.Module, inputs: Sequence[Any]):
    """The module's state (fact.module_state.preserved_state: buffers, plain tensor attributes,
    other state), its parameters' values (a forward may clamp one in place; copied to host
    memory, not the GPU's) and the random number generators, as they were."""
    parameters = list(module.parameters())
    copies = [p.detach().to("cpu", copy=True) for p in parameters]
    devices = sorted({x.device.index or 0 for x in inputs
                      if isinstance(x, torch.Tensor) and x.device.type == "cuda"})
    try:
        with preserved_state(module), torch.random.fork_rng(devices=devices):
            yield
    finally:
        with torch.no_grad():
            for parameter, copy in zip(parameters, copies):
                parameter.copy_(copy)


def activation_memory_refusal(module: torch.nn.Module, composed: Callable[..., Any],
                              inputs: Sequence[Any]) -> str | None:
    """None when `composed` (the module composed for training, over the module's own
    parameters) saves at most ACTIVATION_SLACK x the module's eager activation bytes
    (+ SLACK_BYTES) on `inputs`; else the reason, with both sizes."""
    owned = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    owned |= {t.untyped_storage().data_ptr() for t in (*module.parameters(), *module.buffers())}
    with state_kept(module, inputs), torch.enable_grad():
        eager = saved_activation_bytes(module, inputs, owned)
        fact = saved_activation_bytes(composed, inputs, owned)
    if fact <= ACTIVATION_SLACK * eager + SLACK_BYTES:
        return None
    return (f"its forward saves {fact / 2**20:.2f} MiB of activations for the backward, the "
            f"original's {eager / 2**20:.2f} MiB (gradient checkpointing, or another recomputation "
            f"the traced graphs do not keep): more than {ACTIVATION_SLACK:.2f}x; the original trains")
