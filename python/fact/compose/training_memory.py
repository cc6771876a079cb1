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
them), and the parameters and buffers the forwards write (running statistics, a parameter
clamped in place) are copied back from a copy in host memory. No backward runs: no gradient is
touched.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import torch

ACTIVATION_SLACK = 1.05     # the bound: no more than eager's activation memory + 5%
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
def _state_kept(module: torch.nn.Module, inputs: Sequence[Any]):
    """The module's parameters and buffers, and the random number generators, as they were."""
    tensors = [t for t in (*module.parameters(), *module.buffers())]
    copies = [t.detach().to("cpu", copy=True) for t in tensors]  # host memory, not the GPU's
    devices = sorted({x.device.index or 0 for x in inputs
                      if isinstance(x, torch.Tensor) and x.device.type == "cuda"})
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        # every one back (a kernel that writes a buffer, as batch_norm's running statistics,
        # need not bump its version counter)
        with torch.no_grad():
            for tensor, copy in zip(tensors, copies):
                tensor.copy_(copy)


def activation_memory_refusal(module: torch.nn.Module, composed: Callable[..., Any],
                              inputs: Sequence[Any]) -> str | None:
    """None when `composed` (the module composed for training, over the module's own
    parameters) saves at most ACTIVATION_SLACK x the module's eager activation bytes
    (+ SLACK_BYTES) on `inputs`; else the reason, with both sizes."""
    owned = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    owned |= {t.untyped_storage().data_ptr() for t in (*module.parameters(), *module.buffers())}
    with _state_kept(module, inputs), torch.enable_grad():
        eager = saved_activation_bytes(module, inputs, owned)
        fact = saved_activation_bytes(composed, inputs, owned)
    if fact <= ACTIVATION_SLACK * eager + SLACK_BYTES:
        return None
    return (f"its forward saves {fact / 2**20:.2f} MiB of activations for the backward, the "
            f"original's {eager / 2**20:.2f} MiB (gradient checkpointing, or another recomputation "
            f"the traced graphs do not keep): more than {ACTIVATION_SLACK:.2f}x; the original trains")
