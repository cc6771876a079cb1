"""Training steps and what the training benchmark measures of them (bench/training/
run_training.py): one step is `zero_grad(set_to_none=True)`, the forward (under autocast when
the case asks for it), the loss, `backward()` and `AdamW.step()`.

    Data(shape, pool, device)        a fixed pool of (input, target) batches; `order(seed, steps)`
    Trainer(forward, parameters, ...) one variant's step with its own AdamW
    reset(module, state)             the initial weights back, in place (parameter objects kept)
    gradients(...), float64_gradients(...)   the first step's parameter gradients
    step_times_ms(steps, device, ...)  interleaved medians of full steps
    peak_step_mib(step, device)      what one step adds to the allocated memory at its peak
"""
from __future__ import annotations

import contextlib
import copy
import statistics
import time
from typing import Callable, Optional

import torch
from torch import nn

from fact.timing import L2Flusher, time_cuda_interleaved


def loss_of(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error in the target's dtype (a regression to a fixed random target): float32
    for every variant (a bf16 autocast output is raised to it), float64 for the float64
    references, whose outputs must not be rounded to float32 on the way."""
    return (output.to(target.dtype) - target).square().mean()


def autocast_context(device: torch.device, dtype: Optional[torch.dtype]):
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


class Data:
    """`pool` batches of normal inputs of `shape` and targets of the same shape, drawn once from
    `seed`; `order(seed, steps)` is the batch index of each step (a permutation of the pool per
    epoch, drawn from the data-order seed)."""

    def __init__(self, shape: tuple, pool: int, device: torch.device, seed: int = 1234):
        generator = torch.Generator().manual_seed(seed)
        self.batches = [(torch.randn(shape, generator=generator).to(device),
                         torch.randn(shape, generator=generator).to(device)) for _ in range(pool)]

    def order(self, seed: int, steps: int) -> list[int]:
        generator = torch.Generator().manual_seed(seed)
        indices: list[int] = []
        while len(indices) < steps:
            indices += torch.randperm(len(self.batches), generator=generator).tolist()
        return indices[:steps]


class Trainer:
    """One variant: `forward` (the module it runs) and the parameters its AdamW updates."""

    def __init__(self, forward: Callable, parameters, device: torch.device,
                 autocast: Optional[torch.dtype], lr: float):
        self.forward, self.parameters = forward, list(parameters)
        self.device, self.autocast, self.lr = device, autocast, lr
        self.new_optimizer()

    def new_optimizer(self) -> None:
        self.optimizer = torch.optim.AdamW(self.parameters, lr=self.lr)

    def step(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with autocast_context(self.device, self.autocast):
            loss = loss_of(self.forward(x), target)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def losses(self, data: Data, order: list[int]) -> list[float]:
        """A training run: one step per index of `order`; the loss of each step."""
        losses = [self.step(*data.batches[index]) for index in order]
        return torch.stack(losses).tolist()


def reset(module: nn.Module, state: dict) -> None:
    """Loads `state` into `module` in place: the parameter objects (which a composed module and
    the optimizers hold) stay the same."""
    module.load_state_dict(state)


def gradients(forward: Callable, module: nn.Module, x: torch.Tensor, target: torch.Tensor,
              device: torch.device, autocast: Optional[torch.dtype]) -> dict:
    """The parameter gradients (by name) of one forward and backward of `forward`, whose
    parameters are `module`'s."""
    module.zero_grad(set_to_none=True)
    with autocast_context(device, autocast):
        loss = loss_of(forward(x), target)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in module.named_parameters() if p.grad is not None}
    module.zero_grad(set_to_none=True)
    return grads


def float64_gradients(module: nn.Module, x: torch.Tensor, target: torch.Tensor) -> dict:
    """The same gradients from a float64 copy of `module` (no autocast): the reference."""
    reference = copy.deepcopy(module).double()
    loss = loss_of(reference(x.double()), target.double())
    loss.backward()
    grads = {name: p.grad.detach() for name, p in reference.named_parameters() if p.grad is not None}
    del reference, loss
    return grads


def rel_errors(got: dict, want: dict) -> dict:
    """‖got - want‖ / ‖want‖ per parameter (NaN where one side has no gradient)."""
    errors = {}
    for name, reference in want.items():
        if name not in got:
            errors[name] = float("nan")
            continue
        diff = torch.linalg.vector_norm((got[name].double() - reference).flatten())
        errors[name] = float(diff / torch.linalg.vector_norm(reference.flatten()).clamp_min(1e-300))
    return errors


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_times_ms(steps: dict[str, Callable[[], object]], device: torch.device, warmup: int,
                  iters: int) -> dict:
    """Median ms of each full training step, timed interleaved (each variant once per round,
    the order rotating). CUDA: CUDA events around each step, no L2 flush (a step's working set,
    weights, gradients, AdamW's moments and activations, is many times the L2, and a step
    follows a step in training). CPU (smoke runs): time.perf_counter around each step."""
    if device.type == "cuda":
        stats = time_cuda_interleaved(steps, warmup, iters, L2Flusher(0, device))
        return {name: {"median_ms": s.median_ms, "p10_ms": s.p10_ms, "p90_ms": s.p90_ms,
                       "timer": s.timer} for name, s in stats.items()}
    names = list(steps)
    for _ in range(warmup):
        for name in names:
            steps[name]()
    samples: dict[str, list] = {name: [] for name in names}
    for round_index in range(iters):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            steps[name]()
            samples[name].append((time.perf_counter() - start) * 1e3)
    timer = f"time.perf_counter (CPU), {warmup} warm-up + {iters} timed steps, interleaved"
    return {name: {"median_ms": statistics.median(values), "p10_ms": min(values), "p90_ms": max(values),
                   "timer": timer} for name, values in samples.items()}


def peak_step_mib(step: Callable[[], object], device: torch.device) -> Optional[dict]:
    """One step's memory on CUDA: `peak_mib` (torch.cuda.max_memory_allocated during it, every
    variant's weights and optimizer states on the device included) and `step_mib` (that peak
    minus what was allocated before the step: gradients, activations, the optimizer's
    temporaries). None on the CPU."""
    if device.type != "cuda":
        return None
    synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    return {"peak_mib": peak / 2**20, "step_mib": (peak - before) / 2**20}
