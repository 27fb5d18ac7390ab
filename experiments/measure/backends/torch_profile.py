"""torch's side of a profile (experiments/measure/profile.py): torch.profiler over a few steps, each op in its
category, the trace as Chrome JSON; and, with torch.compile, Dynamo's graph and Inductor's code kept. Worker side.

An op is a top-level ATen call (`aten::conv2d` with all it calls), a backward node, or one of Inductor's kernels.
In eager mode a range is opened around the model's call (so what runs outside it in a training step is the loss)
and around the module classes of `TORCH_MODULES`. A backward node takes its forward op's category (the same
autograd sequence number). Everything inside `Optimizer.step` and `zero_grad`, and AccumulateGrad in a training
step, is the optimizer. Where CUDA is present, the ops are the GPU kernels, each in the category of the op that launched it.
"""
from __future__ import annotations

import contextlib
import io
import logging
import re
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch._inductor.config as inductor_config
from torch.autograd import DeviceType
from torch.nn.modules import module as nn_module
from torch.profiler import ProfilerActivity, profile, record_function

from experiments.common.protocol import Setup
from experiments.measure.backends import Span, Step, Traced
from experiments.measure.categories import (INDUCTOR, TORCH, TORCH_BACKWARD, TORCH_CONTAINERS, TORCH_MODULES,
                                            first_match)

BACKWARD = "autograd::engine::evaluate_function: "
KERNEL = re.compile(r"^(?:graph_\d+_)?(?:cpp|triton_[a-z]+)_fused_(.*)$")  # Inductor: cpp_fused_relu_3, triton_poi_...
GRAPH_LOG = "torch._dynamo.output_graph.__graph_code"  # where Dynamo logs each graph it captured, as Python


@contextlib.contextmanager
def capture(setup: Setup) -> Iterator[Callable[[Step], str | None]]:
    """Entered before the step is built. With compile: Inductor's kernels become profiler ranges (a setting of the
    generated code, so this program differs from the timed one by a check per kernel) and Dynamo's graphs are
    kept; yields program(step): the graphs and the generated code as text (None in eager)."""
    if not setup.compile:
        yield lambda step: None
        return
    graphs, handler = io.StringIO(), None
    kernel_ranges = inductor_config.cpp.enable_kernel_profile
    inductor_config.cpp.enable_kernel_profile = True
    torch._logging.set_logs(graph_code=True)
    log = logging.getLogger(GRAPH_LOG)
    handler = logging.StreamHandler(graphs)
    log.addHandler(handler)
    log.propagate = False  # kept here, not printed to the worker's log
    try:
        yield lambda step: program(graphs.getvalue(), step)
    finally:
        log.removeHandler(handler)
        torch._logging.set_logs()
        inductor_config.cpp.enable_kernel_profile = kernel_ranges


def program(graphs: str, step: Step) -> str:
    """Dynamo's graphs (their per-process ids made stable, so two versions' programs diff), then Inductor's code."""
    graphs = re.sub(r"(__compiled_fn_\d+)_[0-9a-f_]{36}", r"\1", graphs)
    return f"# ==== Dynamo's graphs, as captured\n{graphs}\n{step.program() if step.program else ''}"


class ModuleRanges:
    """Eager only: a profiler range around the model's call, and around each call of a `TORCH_MODULES` class
    (global module hooks; about 10 µs a range, so not one per module). Compiled code runs no hooks."""

    def __init__(self):
        self.depth, self.open, self.handles = 0, [], []

    def pre(self, mod, args):
        self.depth += 1
        name = type(mod).__name__
        if self.depth == 1 or name in TORCH_MODULES:
            self.open.append((self.depth, record_function(f"nn.Module: {name}").__enter__()))

    def post(self, mod, args, out):
        if self.open and self.open[-1][0] == self.depth:
            self.open.pop()[1].__exit__(None, None, None)
        self.depth -= 1

    def __enter__(self):
        self.handles = [nn_module.register_module_forward_pre_hook(self.pre),
                        nn_module.register_module_forward_hook(self.post)]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()


def category(name: str, context: list[str], op: str, eager: bool) -> str:
    """A forward op's category: its context (optimizer, a module range, outside the model), else its name."""
    for c in reversed(context):
        if c.startswith("Optimizer."):
            return "optimizer"
        if c.startswith("nn.Module: ") and c[11:] in TORCH_MODULES:
            return TORCH_MODULES[c[11:]]
    if m := KERNEL.match(name):
        return first_match(INDUCTOR, m.group(1))
    if eager and op != "inference" and not any(c.startswith("nn.Module: ") for c in context):
        return "loss"  # a forward op outside the model's call in a training or grad step
    return first_match(TORCH, name)


def trace(step: Step, op: str, steps: int, out: Path, device: str, program: str | None
          ) -> tuple[list[Traced], list[str]]:
    """`steps` calls under torch.profiler, each in a range `nnbench.step#<i>`; writes trace.json.gz."""
    eager, cuda = step.compiles is None, device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with ModuleRanges() if eager else contextlib.nullcontext(), profile(activities=activities) as prof:
        for i in range(steps):
            with record_function(f"nnbench.step#{i}"):
                step.sync(step.fn())
    prof.export_chrome_trace(str(out / "trace.json.gz"))  # gzipped by torch, from the suffix
    events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    marks = sorted((e for e in events if e.name.startswith("nnbench.step#")), key=lambda e: e.time_range.start)
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA and not e.is_user_annotation
               and not e.name.startswith(("nnbench.", "nn.Module: "))] if cuda else []  # not the ranges' GPU copies
    traced = [walk(mark, events, kernels, op, eager) for mark in marks]
    notes = [] if eager else ["the profiled program has Inductor's kernel ranges compiled in "
                              "(enable_kernel_profile); the timed one has not"]
    return traced, notes


def walk(mark, events: list, kernels: list, op: str, eager: bool) -> Traced:
    """The ops of one step: the top-level events inside its range on any thread (the autograd engine may run
    the backward on a thread of its own), containers opened, backward nodes placed after the forward ops."""
    s0, s1 = mark.time_range.start, mark.time_range.end
    ops = StepOps(op, eager)
    for e in mark.cpu_children:
        ops.visit(e, [mark.name])
    for e in events:  # the backward on the autograd engine's own threads (CUDA)
        if e.cpu_parent is None and e is not mark and e.thread != mark.thread and s0 <= e.time_range.start < s1:
            ops.visit(e, [])
    ops.place_backward()
    spans = ops.spans
    if kernels:  # on a GPU the ops are the kernels: each in its launching op's category
        spans = [Span(k.name, ops.owner.get(k.linked_correlation_id) or category(k.name, [], op, eager=False),
                      k.time_range.start / 1e6, k.time_range.end / 1e6) for k in kernels
                 if s0 <= k.time_range.start < s1]
    return Traced(s0 / 1e6, s1 / 1e6, spans)


class StepOps:
    """One step's ops as `walk` meets them: the spans so far, and what places the rest (a backward node after the
    forward ops, a kernel by the op that launched it)."""

    def __init__(self, op: str, eager: bool):
        self.op, self.eager = op, eager
        self.spans: list[Span] = []
        self.forward: dict[int, str] = {}  # autograd sequence number -> the forward op's category
        self.owner: dict[int, str] = {}  # event id (a kernel's linked correlation id) -> the category of its op
        self.backward: list[tuple] = []  # (backward node, its context), placed once every forward op is

    def visit(self, e, context: list[str]) -> None:
        if TORCH_CONTAINERS.match(e.name):
            for c in e.cpu_children:
                self.visit(c, context + [e.name])
        elif e.name.startswith(BACKWARD):
            self.backward.append((e, context))
        else:
            self.add(e, category(e.name, context, self.op, self.eager), sequence=True)

    def add(self, e, cat: str, sequence: bool = False) -> None:
        self.spans.append(Span(e.name.removeprefix(BACKWARD), cat, e.time_range.start / 1e6, e.time_range.end / 1e6))
        stack = [e]
        while stack:
            x = stack.pop()
            self.owner[x.id] = cat
            if sequence and x.sequence_nr >= 0:
                self.forward.setdefault(x.sequence_nr, cat)
            stack.extend(x.cpu_children)

    def place_backward(self) -> None:
        """Each backward node in the optimizer, a copy, its forward op's category or else its own name's."""
        for e, context in self.backward:
            node = e.name.removeprefix(BACKWARD)
            if any(c.startswith("Optimizer.") for c in context):
                self.add(e, "optimizer")
            elif "AccumulateGrad" in node:  # a gradient handed to its parameter for the optimizer, or handed out
                self.add(e, "optimizer" if self.op == "training" else "copy")
            else:
                self.add(e, self.forward.get(e.sequence_nr) or first_match(TORCH_BACKWARD, node))
