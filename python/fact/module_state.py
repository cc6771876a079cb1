"""Modules that keep state in tensors: buffers, and plain tensor attributes (`self.h0 =
torch.zeros(...)` in `__init__`, `self.state = new` in `forward`).

FACT runs the user's module many times while it optimizes it (the capture, the checks, the
timings); none of those runs may change what the module holds (`preserved_state`). A plain
tensor attribute that the forward reassigns or writes in place is state that torch.export
would bake in as a constant: the capture exports it as a buffer instead
(`tensor_attributes_as_buffers`), so the exported graph writes it back, and the composed
module hands the written value back to the attribute after each call (`StateBinding`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch


def plain_tensor_attributes(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module, str]]:
    """(qualified name, owner, attribute name) of every tensor held in a module's `__dict__`
    that is neither a parameter nor a buffer, for the module and its submodules."""
    found = []
    for prefix, owner in module.named_modules(remove_duplicate=True):
        for name, value in list(vars(owner).items()):
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                found.append((f"{prefix}.{name}" if prefix else name, owner, name))
    return found


@dataclass
class _Held:
    owner: torch.nn.Module
    name: str
    is_buffer: bool
    tensor: torch.Tensor          # the object the module held
    contents: torch.Tensor        # a copy of its values


def _held_tensors(module: torch.nn.Module) -> list[_Held]:
    held = []
    with torch.no_grad():
        for _, owner in module.named_modules(remove_duplicate=True):
            for name, buffer in owner._buffers.items():
                if buffer is not None:
                    held.append(_Held(owner, name, True, buffer, buffer.detach().clone()))
        for _, owner, name in plain_tensor_attributes(module):
            tensor = vars(owner)[name]
            held.append(_Held(owner, name, False, tensor, tensor.detach().clone()))
    return held


def _changed(held: _Held) -> bool:
    now = held.owner._buffers.get(held.name) if held.is_buffer else vars(held.owner).get(held.name)
    if now is not held.tensor:
        return True
    if held.tensor.is_inference() or held.tensor.device.type == "meta":
        return False
    with torch.no_grad():
        return not torch.equal(held.tensor, held.contents)


def _restore(held: _Held) -> None:
    with torch.no_grad():
        if held.tensor.device.type != "meta" and not held.tensor.is_inference():
            held.tensor.copy_(held.contents)
    if held.is_buffer:
        held.owner._buffers[held.name] = held.tensor
    else:
        held.owner.__dict__[held.name] = held.tensor


@contextlib.contextmanager
def preserved_state(module: torch.nn.Module) -> Iterator[None]:
    """Runs the body and then puts back every buffer and plain tensor attribute of `module`
    (the same objects, with the values they had), so FACT's own runs of the module leave it
    as the user gave it."""
    held = _held_tensors(module)
    try:
        yield
    finally:
        for h in held:
            if _changed(h):
                _restore(h)


def attributes_the_forward_writes(module: torch.nn.Module, run: Callable[[], Any]) -> list[str]:
    """Qualified names of the plain tensor attributes that `run()` (a forward) reassigns or
    writes in place; the module's state is put back afterwards. A forward that raises writes
    nothing here (the capture reports its error)."""
    held = [h for h in _held_tensors(module) if not h.is_buffer]
    if not held:
        return []
    names = {id(h): qualified for (qualified, owner, name), h in
             zip(plain_tensor_attributes(module), held)}
    written = []
    with preserved_state(module):
        try:
            with torch.no_grad():
                run()
        except Exception:  # noqa: BLE001 - the capture runs it again and reports the error
            return []
        written = [names[id(h)] for h in held if _changed(h)]
    return written


@contextlib.contextmanager
def tensor_attributes_as_buffers(module: torch.nn.Module, names: list[str]) -> Iterator[None]:
    """The named plain tensor attributes registered as non-persistent buffers for the body (so
    torch.export records the forward's writes to them as buffer mutations, not constants), and
    plain attributes again afterwards, holding whatever the body left in them."""
    moved = []
    try:
        for qualified in names:
            prefix, _, name = qualified.rpartition(".")
            owner = module.get_submodule(prefix) if prefix else module
            tensor = vars(owner).pop(name)
            owner.register_buffer(name, tensor, persistent=False)
            moved.append((owner, name))
        yield
    finally:
        for owner, name in moved:
            tensor = owner._buffers.pop(name)
            owner._non_persistent_buffers_set.discard(name)
            owner.__dict__[name] = tensor


class StateBinding:
    """A plain tensor attribute of the user's module that the composed graph holds as a buffer
    (the capture exported it as one because the forward writes it). Before a composed call the
    attribute's current value is copied into the buffer when the attribute holds another tensor
    (the user reset it, or the original module ran); after it the attribute gets a copy of what
    the graph wrote, as the original forward would have assigned a new tensor."""

    def __init__(self, owner: torch.nn.Module, name: str, buffer: torch.Tensor, qualified: str):
        self.owner, self.name, self.buffer, self.qualified = owner, name, buffer, qualified

    def fits(self) -> bool:
        """Whether the attribute's current tensor can be copied into the buffer."""
        now = vars(self.owner).get(self.name)
        return isinstance(now, torch.Tensor) and (now is self.buffer or (
            now.shape == self.buffer.shape and now.dtype == self.buffer.dtype))

    def before_call(self) -> None:
        now = vars(self.owner).get(self.name)
        if now is not self.buffer:
            with torch.no_grad():
                self.buffer.copy_(now)

    def after_call(self) -> None:
        with torch.no_grad():
            self.owner.__dict__[self.name] = self.buffer.detach().clone()


def state_bindings(original: torch.nn.Module, graph_module: torch.nn.Module) -> list[StateBinding]:
    """A StateBinding for every plain tensor attribute of `original` that `graph_module` (the
    composed graph, unlifted from the export) holds as a buffer of the same name."""
    buffers = dict(graph_module.named_buffers(remove_duplicate=False))
    return [StateBinding(owner, name, buffers[qualified], qualified)
            for qualified, owner, name in plain_tensor_attributes(original) if qualified in buffers]


def export_keeping_state(module: torch.nn.Module, example_inputs: tuple, **export_options: Any
                         ) -> tuple[torch.export.ExportedProgram, list[str]]:
    """torch.export.export(module, example_inputs, **export_options) with the plain tensor
    attributes the forward writes exported as buffers (their writes become buffer mutations
    of the graph); returns the program and those attributes' qualified names. The module's
    state is as before."""
    written = attributes_the_forward_writes(module, lambda: module(*example_inputs))
    with preserved_state(module), tensor_attributes_as_buffers(module, written):
        return torch.export.export(module, example_inputs, **export_options), written


def leaves_module_state_alone(function: Callable) -> Callable:
    """Decorates a function whose first argument is a module it runs: every buffer and plain
    tensor attribute of that module is put back when it returns (preserved_state)."""
    import functools

    @functools.wraps(function)
    def wrapper(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        with preserved_state(module):
            return function(module, *args, **kwargs)
    return wrapper
