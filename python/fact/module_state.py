"""Modules that keep state: buffers, plain tensor attributes (`self.h0 = torch.zeros(...)` in
`__init__`, `self.state = new` in `forward`), and other attributes the forward may change
(tensors held in lists, tuples and dicts; Python numbers such as a call counter).

FACT runs the user's module many times while it optimizes it (the capture, the checks, the
timings); none of those runs may change what the module holds (`preserved_state`). A plain
tensor attribute that the forward reassigns or writes in place is state that torch.export
would bake in as a constant: the capture exports it as a buffer instead
(`tensor_attributes_as_buffers`), so the exported graph writes it back, and the composed
module hands the written value back to the attribute after each call (`StateBinding`).
Buffers and the plain tensor attributes the forward only reads are bound too: a tensor the
user assigns later is copied into the graph's before a call. State the composed graph cannot
carry — a forward that changes, on every call, a tensor held in a container or a Python value
(torch.export bakes both in as constants) — is reported by `forward_writes` as not kept, and
fact.compose declines the module with that reason instead of serving every call the first
call's values.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
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



# The attributes every nn.Module has (hooks, flags, the parameter / buffer / submodule
# tables): not the module's own state.
_MODULE_KEYS = frozenset(vars(torch.nn.Module()))
_SCALARS = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.Size)
_DEPTH, _WIDTH = 4, 4096   # containers deeper or longer than this are compared by identity


def _holds_state(value: Any, depth: int = 0) -> bool:
    """Whether a value is state the forward could change and torch.export would bake in: a
    Python number or string, or a list / tuple / dict holding one or a (non-parameter) tensor."""
    if isinstance(value, torch.nn.Parameter) or isinstance(value, torch.nn.Module):
        return False
    if isinstance(value, _SCALARS) or isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple, dict)) and depth < _DEPTH and len(value) <= _WIDTH:
        children = value.values() if isinstance(value, dict) else value
        return any(_holds_state(child, depth + 1) for child in children)
    return False


def other_state_attributes(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module, str]]:
    """(qualified name, owner, attribute name) of every attribute of the module and its
    submodules that holds state (_holds_state) and is not a plain tensor attribute, a
    parameter, a buffer or a submodule: `self.count = 0`, `self.hidden = (h0, c0)`,
    `self.memory = {"m": tensor}`."""
    found = []
    for prefix, owner in module.named_modules(remove_duplicate=True):
        for name, value in list(vars(owner).items()):
            if name in _MODULE_KEYS or isinstance(value, torch.Tensor) or not _holds_state(value):
                continue
            found.append((f"{prefix}.{name}" if prefix else name, owner, name))
    return found


def _fingerprint(value: Any, depth: int = 0) -> Any:
    """A value-comparable record of `value` (_same_fingerprint): tensors by their contents,
    Python values by equality, containers element by element, anything else by identity."""
    if isinstance(value, torch.nn.Parameter):
        return ("object", id(value))
    if isinstance(value, torch.Tensor):
        if value.device.type == "meta" or value.is_inference():
            return ("object", id(value))
        return ("tensor", value.detach().clone())
    if isinstance(value, _SCALARS):
        return ("value", type(value), value)
    if isinstance(value, (list, tuple)) and depth < _DEPTH and len(value) <= _WIDTH:
        return ("sequence", type(value), [_fingerprint(v, depth + 1) for v in value])
    if isinstance(value, dict) and depth < _DEPTH and len(value) <= _WIDTH:
        return ("dict", type(value), [(k, _fingerprint(v, depth + 1)) for k, v in value.items()])
    return ("object", id(value))


def _same_fingerprint(a: Any, b: Any) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "tensor":
        x, y = a[1], b[1]
        return (x.shape == y.shape and x.dtype == y.dtype and x.device == y.device
                and bool(torch.equal(x, y)))
    if a[0] == "value":
        return a[1] is b[1] and (a[2] == b[2] or (a[2] != a[2] and b[2] != b[2]))  # NaN == NaN
    if a[0] == "sequence":
        return (a[1] is b[1] and len(a[2]) == len(b[2])
                and all(_same_fingerprint(x, y) for x, y in zip(a[2], b[2])))
    if a[0] == "dict":
        return (a[1] is b[1] and [k for k, _ in a[2]] == [k for k, _ in b[2]]
                and all(_same_fingerprint(x, y) for (_, x), (_, y) in zip(a[2], b[2])))
    return a[1] == b[1]


def _describe_value(value: Any) -> str:
    if isinstance(value, (list, tuple, dict)):
        tensors = sum(isinstance(leaf, torch.Tensor) for leaf in torch.utils._pytree.tree_leaves(value))
        return f"a {type(value).__name__}" + (f" holding {tensors} tensor(s)" if tensors else "")
    return f"a Python {type(value).__name__}"


class _HeldOther:
    """An attribute holding other state (other_state_attributes): the object, and what is
    needed to put its contents back in place (list items, dict entries, tensor values)."""

    def __init__(self, owner: torch.nn.Module, name: str):
        self.owner, self.name = owner, name
        self.value = vars(owner)[name]
        self.contents = self._record(self.value, 0)

    def _record(self, value: Any, depth: int) -> Any:
        if isinstance(value, torch.nn.Parameter):
            return None
        if isinstance(value, torch.Tensor):
            if value.device.type == "meta" or value.is_inference():
                return None
            return ("tensor", value, value.detach().clone())
        if isinstance(value, (list, tuple)) and depth < _DEPTH and len(value) <= _WIDTH:
            return ("sequence", value, list(value), [self._record(v, depth + 1) for v in value])
        if isinstance(value, dict) and depth < _DEPTH and len(value) <= _WIDTH:
            return ("dict", value, dict(value), [self._record(v, depth + 1) for v in value.values()])
        return None

    def _put_back(self, record: Any) -> None:
        if record is None:
            return
        if record[0] == "tensor":
            with torch.no_grad():
                if not torch.equal(record[1], record[2]):
                    record[1].copy_(record[2])
            return
        kind, value, items, children = record
        if kind == "sequence" and isinstance(value, list):
            value[:] = items
        elif kind == "dict":
            value.clear()
            value.update(items)
        for child in children:
            self._put_back(child)

    def restore(self) -> None:
        self.owner.__dict__[self.name] = self.value
        self._put_back(self.contents)


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
    """Runs the body and then puts back every buffer, plain tensor attribute and other state
    attribute (other_state_attributes) of `module` (the same objects, with the values and
    items they had), so FACT's own runs of the module leave it as the user gave it."""
    held = _held_tensors(module)
    others = [_HeldOther(owner, name) for _, owner, name in other_state_attributes(module)]
    try:
        yield
    finally:
        for h in held:
            if _changed(h):
                _restore(h)
        for other in others:
            other.restore()


@dataclass
class ForwardWrites:
    """What one forward writes of the module's own state (forward_writes)."""
    attributes: list = field(default_factory=list)  # plain tensor attributes (qualified names)
    not_kept: list = field(default_factory=list)    # "'name' (what it holds)": state torch.export bakes in

    def reason(self) -> str:
        """Why a module whose forward writes `not_kept` is not composed ("" when it can be)."""
        if not self.not_kept:
            return ""
        return (f"the forward changes state on every call that the exported graph would hold as a "
                f"constant ({'; '.join(self.not_kept)}): a composed module would not update it, "
                f"or would read the first call's value on every call; register the tensors as "
                f"buffers or keep them as plain tensor attributes to compose this module")


def forward_writes(module: torch.nn.Module, run: Callable[[], Any]) -> ForwardWrites:
    """The plain tensor attributes that `run()` (a forward) reassigns or writes in place, and
    the other state (other_state_attributes) it changes on every call: changed by this run and
    again by a second one (a cache the first call fills is not state that changes). The
    module's state is put back afterwards. A forward that raises writes nothing here (the
    capture runs it again and reports its error)."""
    held = [h for h in _held_tensors(module) if not h.is_buffer]
    names = {id(h): qualified for (qualified, owner, name), h in
             zip(plain_tensor_attributes(module), held)}
    others = other_state_attributes(module)

    def changed_others(before: dict) -> list[str]:
        return [q for q, owner, name in others
                if name not in vars(owner) or not _same_fingerprint(before[q], _fingerprint(vars(owner)[name]))]

    writes = ForwardWrites()
    with preserved_state(module):
        before = {q: _fingerprint(vars(owner)[name]) for q, owner, name in others}
        try:
            with torch.no_grad():
                run()
        except Exception:  # noqa: BLE001 - the capture runs it again and reports the error
            return writes
        writes.attributes = [names[id(h)] for h in held if _changed(h)]
        changed = changed_others(before)
        if changed:
            before = {q: _fingerprint(vars(owner)[name]) for q, owner, name in others if name in vars(owner)}
            try:
                with torch.no_grad():
                    run()
            except Exception:  # noqa: BLE001 - as above
                return writes
            again = set(changed_others({q: before.get(q, ("missing",)) for q, _, _ in others}))
            described = {q: _describe_value(vars(owner).get(name)) for q, owner, name in others}
            writes.not_kept = [f"'{q}' ({described[q]})" for q in changed if q in again]
    return writes


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
    """A tensor of the user's module that the composed graph holds as its own tensor of the
    same qualified name: a buffer (`kind` "buffer"), a plain tensor attribute the forward
    writes (exported as a buffer because of that: "written attribute"), or one it only reads
    (a constant of the graph: "read attribute"). The graph's tensor starts as the very object
    the module held. Before a composed call the module's current tensor is copied into the
    graph's when the module holds another object (the user assigned a new one, or the original
    forward ran and reassigned it). After it, a written attribute gets a copy of what the graph
    wrote, as the original forward would have assigned a new tensor; a buffer the module holds
    as another object gets the graph's values copied in."""

    def __init__(self, owner: torch.nn.Module, name: str, tensor: torch.Tensor, qualified: str,
                 kind: str = "written attribute"):
        self.owner, self.name, self.tensor, self.qualified, self.kind = owner, name, tensor, qualified, kind

    def _now(self) -> Any:
        if self.kind == "buffer":
            return self.owner._buffers.get(self.name)
        return vars(self.owner).get(self.name)

    def fits(self) -> bool:
        """Whether the module's current tensor can be copied into the graph's."""
        now = self._now()
        return isinstance(now, torch.Tensor) and (now is self.tensor or (
            now.shape == self.tensor.shape and now.dtype == self.tensor.dtype
            and now.device == self.tensor.device))

    def before_call(self) -> None:
        now = self._now()
        if now is not self.tensor:
            with torch.no_grad():
                self.tensor.copy_(now)

    def after_call(self) -> None:
        if self.kind == "written attribute":
            with torch.no_grad():
                self.owner.__dict__[self.name] = self.tensor.detach().clone()
        elif self.kind == "buffer":
            now = self._now()
            if now is not self.tensor:
                with torch.no_grad():
                    now.copy_(self.tensor)


class HeldConstant:
    """A tensor in a container attribute of the user's module (`self.hidden = (h0, c0)`) that
    the exported graph holds as a copy (torch.export lifts it as a constant): the composed
    graph is right only while the container holds the same tensor with the same values.
    `fits()` says whether it still does (the tensor's identity and version counter, no
    device synchronization); a composed module runs the original when it does not."""

    kind = "held constant"

    def __init__(self, owner: torch.nn.Module, name: str, path: tuple, tensor: torch.Tensor, qualified: str):
        self.owner, self.name, self.path, self.tensor, self.qualified = owner, name, path, tensor, qualified
        self.version = tensor._version

    def fits(self) -> bool:
        value = vars(self.owner).get(self.name)
        try:
            for key in self.path:
                value = value[key]
        except (KeyError, IndexError, TypeError):
            return False
        return value is self.tensor and value._version == self.version

    def before_call(self) -> None:
        pass

    def after_call(self) -> None:
        pass


def _container_tensors(value: Any, path: tuple = (), depth: int = 0) -> Iterator[tuple[tuple, torch.Tensor]]:
    if isinstance(value, torch.nn.Parameter):
        return
    if isinstance(value, torch.Tensor):
        if path and value.device.type != "meta" and not value.is_inference():
            yield path, value
        return
    if depth < _DEPTH and isinstance(value, (list, tuple)) and len(value) <= _WIDTH:
        for index, child in enumerate(value):
            yield from _container_tensors(child, path + (index,), depth + 1)
    elif depth < _DEPTH and isinstance(value, dict) and len(value) <= _WIDTH:
        for key, child in value.items():
            yield from _container_tensors(child, path + (key,), depth + 1)


def _graph_attribute(graph_module: torch.nn.Module, qualified: str) -> Any:
    prefix, _, name = qualified.rpartition(".")
    try:
        owner = graph_module.get_submodule(prefix) if prefix else graph_module
    except AttributeError:
        return None
    return vars(owner).get(name)


def state_bindings(original: torch.nn.Module, graph_module: torch.nn.Module) -> list:
    """A StateBinding for every buffer and plain tensor attribute of `original` that
    `graph_module` (the composed graph, unlifted from the export) holds under the same name,
    and a HeldConstant for every tensor held in a container attribute of `original`."""
    buffers = dict(graph_module.named_buffers(remove_duplicate=False))
    bindings: list = []
    for qualified, owner, name in plain_tensor_attributes(original):
        if qualified in buffers:
            bindings.append(StateBinding(owner, name, buffers[qualified], qualified, "written attribute"))
            continue
        constant = _graph_attribute(graph_module, qualified)
        if isinstance(constant, torch.Tensor):
            bindings.append(StateBinding(owner, name, constant, qualified, "read attribute"))
    for prefix, owner in original.named_modules(remove_duplicate=True):
        for name, buffer in owner._buffers.items():
            qualified = f"{prefix}.{name}" if prefix else name
            if buffer is not None and isinstance(buffers.get(qualified), torch.Tensor):
                bindings.append(StateBinding(owner, name, buffers[qualified], qualified, "buffer"))
    for qualified, owner, name in other_state_attributes(original):
        for path, tensor in _container_tensors(vars(owner)[name]):
            bindings.append(HeldConstant(owner, name, path, tensor, qualified))
    return bindings


def export_keeping_state(module: torch.nn.Module, example_inputs: tuple, **export_options: Any
                         ) -> tuple[torch.export.ExportedProgram, ForwardWrites]:
    """torch.export.export(module, example_inputs, **export_options) with the plain tensor
    attributes the forward writes exported as buffers (their writes become buffer mutations
    of the graph); returns the program and what the forward writes (forward_writes: those
    attributes' qualified names, and the state the graph cannot keep). The module's state is
    as before. Convolutions that are GEMMs (a ViT's patch embedding) come out as a linear
    (fact.patch_gemms), a linear over a transposed input whose readers allow it runs over the
    untransposed rows (fact.transposed_linears: nn.MultiheadAttention's in-projection), and a
    linear whose rows are transposed back afterwards runs over rows already in that order
    (fact.transposed_linear_outputs: its out-projection)."""
    from fact.patch_gemms import rewrite_patch_convolutions
    from fact.transposed_linear_outputs import rewrite_transposed_linear_outputs
    from fact.transposed_linears import rewrite_transposed_linears
    writes = forward_writes(module, lambda: module(*example_inputs))
    with preserved_state(module), tensor_attributes_as_buffers(module, writes.attributes):
        program = torch.export.export(module, example_inputs, **export_options)
    rewrite_patch_convolutions(program.graph_module)
    rewrite_transposed_linears(program.graph_module)
    rewrite_transposed_linear_outputs(program.graph_module)
    return program, writes


def leaves_module_state_alone(function: Callable) -> Callable:
    """Decorates a function whose first argument is a module it runs: every buffer and plain
    tensor attribute of that module is put back when it returns (preserved_state)."""
    import functools

    @functools.wraps(function)
    def wrapper(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        with preserved_state(module):
            return function(module, *args, **kwargs)
    return wrapper
