"""Host offload and collectives in a parsed module: each transfer, the engine that moves it, the summaries."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from typing import Any

from .shapes import ArrayShape, COLLECTIVE_OPCODES, TupleShape, flatten_shape
from .module import HloModule, Instruction


# ----------------------------------------------------------------------------- host offload

ENGINES = ("copy_engine", "kernel", "dma")
ENGINE_NAMES = {"copy_engine": "copy engine (DMA)", "kernel": "SM kernel (zero-copy)", "dma": "TPU DMA"}
# Why each engine: the XLA source the classification rests on (file:line in the research notes named)
ENGINE_SOURCES = {
    "copy_engine": "XLA:GPU runs a slice fusion carrying a memcpy descriptor (dynamic_slice_config) as a memcpy: "
                   "at jaxlib 0.10.2 a kCustom dynamic-slice fusion (docs/research/46231-workaround-transfers.md); "
                   "at 0.12 a kLoop one that thunk_emitter.cc's EmitFusion matches (AnalyzeDynamicSliceCopyFusion) "
                   "and runs as a DeviceToDeviceCopyThunk, cuMemcpyDtoDAsync on the memcpy_d2h/h2d streams "
                   "(docs/research/xla-0.12-host-transfers.md)",
    "kernel": "a kLoop slice fusion with no memcpy descriptor is a generated kernel whose threads move the bytes "
              "over the link from the SMs (docs/research/46231-workaround-transfers.md)",
    "dma": "XLA:TPU's async dynamic-(update-)slice-start: the TPU's DMA engines",
}


@dataclasses.dataclass(frozen=True)
class HostTransfer:
    """One instruction that moves bytes between device HBM and pinned host memory.

    ``engine`` says what moves them (``transfer_engine``, ``ENGINE_SOURCES``): ``copy_engine`` — a DMA copy (a
    ``copy-start``, or XLA:GPU's dynamic-slice fusion with a memcpy descriptor: ``kCustom`` at jaxlib 0.10.2,
    ``kLoop`` with a ``dynamic_slice_config`` at 0.12); ``kernel`` — a generated kernel (a ``kLoop`` fusion
    without a descriptor) whose threads read or write the pinned host memory over the
    link themselves, on SMs (what ``--xla_disable_hlo_passes=dynamic-slice-annotator``, the lab's #46231
    workaround, turns XLA:GPU's offloaded scan residuals into); ``dma`` — XLA:TPU's native async
    ``dynamic-(update-)slice-start`` (the TPU's DMA engines).
    """

    name: str
    kind: str  # copy | dynamic-update-slice | dynamic-slice | other
    direction: str  # d2h | h2d
    is_async: bool
    bytes_per_execution: int
    executions: int
    computation: str
    engine: str = "copy_engine"

    @property
    def bytes_per_step(self) -> int:
        return self.bytes_per_execution * self.executions

    def describe(self) -> str:
        mode = "async" if self.is_async else "sync"
        arrow = "device -> host" if self.direction == "d2h" else "host -> device"
        return (f"{arrow}  {self.kind:20} {mode:5}  {self.bytes_per_execution / 2**20:9.2f} MiB x "
                f"{self.executions:4} runs = {self.bytes_per_step / 2**20:10.2f} MiB/step  ({self.name} in {self.computation})")


@dataclasses.dataclass(frozen=True)
class OffloadSummary:
    """What the scheduled module does with pinned host memory."""

    host_buffers: int  # S(5) buffers: allocated ones, host copies, host-resident entry parameters
    transfers: tuple[HostTransfer, ...]
    checks: Any = None  # companion.descriptors.DescriptorChecks, filled in by the compiler

    def count(self, direction: str, kind: str | None = None, is_async: bool | None = None) -> int:
        return sum(1 for t in self.transfers if t.direction == direction
                   and (kind is None or t.kind == kind) and (is_async is None or t.is_async == is_async))

    @property
    def d2h_ops(self) -> int:
        return self.count("d2h")

    @property
    def h2d_ops(self) -> int:
        return self.count("h2d")

    @property
    def async_pairs(self) -> int:
        return sum(1 for t in self.transfers if t.is_async)

    @property
    def d2h_bytes_per_step(self) -> int:
        return sum(t.bytes_per_step for t in self.transfers if t.direction == "d2h")

    @property
    def h2d_bytes_per_step(self) -> int:
        return sum(t.bytes_per_step for t in self.transfers if t.direction == "h2d")

    def by_kind(self) -> dict[str, int]:
        return dict(Counter(f"{t.direction} {t.kind}{' async' if t.is_async else ''}" for t in self.transfers))

    def bytes_by_engine(self) -> dict[str, dict[str, int]]:
        """Bytes per step each way, by what moves them (``HostTransfer.engine``): {engine: {d2h, h2d}}."""
        out: dict[str, dict[str, int]] = {}
        for t in self.transfers:
            out.setdefault(t.engine, {"d2h": 0, "h2d": 0})[t.direction] += t.bytes_per_step
        return out

    @property
    def kernel_transfers(self) -> int:
        """Transfers a generated kernel makes on the SMs (``engine == "kernel"``)."""
        return sum(1 for t in self.transfers if t.engine == "kernel")

    def engines(self) -> str:
        """One line: transfers and GiB each way per engine."""
        if not self.transfers:
            return "no host transfers"
        counts = Counter(t.engine for t in self.transfers)
        return "; ".join(f"{counts[e]} by {ENGINE_NAMES[e]} ({b['d2h'] / 2**30:.3f} GiB out, {b['h2d'] / 2**30:.3f} "
                         "GiB back)" for e, b in sorted(self.bytes_by_engine().items()))

    def to_dict(self) -> dict:
        return {
            "host_buffers": self.host_buffers,
            "d2h_ops": self.d2h_ops,
            "h2d_ops": self.h2d_ops,
            "async_pairs": self.async_pairs,
            "d2h_bytes_per_step": self.d2h_bytes_per_step,
            "h2d_bytes_per_step": self.h2d_bytes_per_step,
            "by_kind": self.by_kind(),
            "bytes_by_engine": self.bytes_by_engine(),
        }


def wrapped_root(module: HloModule, instr: Instruction) -> Instruction | None:
    """The root of the first computation ``instr`` calls (what an ``async-start`` or a fusion wraps)."""
    for callee in instr.called:
        comp = module.computations.get(callee)
        if comp is not None:
            return comp.root
    return None


def _wrapped_root_opcode(module: HloModule, instr: Instruction) -> str:
    root = wrapped_root(module, instr)
    return root.opcode if root is not None else ""


def collective_opcode(module: HloModule, instr: Instruction) -> str:
    """``all-gather`` etc. for a collective (sync, ``*-start``, or an ``async-start`` wrapping one);
    "" for anything else (``*-done`` included)."""
    base = _wrapped_root_opcode(module, instr) if instr.opcode == "async-start" else instr.opcode.removesuffix("-start")
    return base if base in COLLECTIVE_OPCODES else ""


def _start_parts(instr: Instruction) -> tuple[list[ArrayShape], ArrayShape | None]:
    """(sources, destination) of an async start: ``((operands...), output, context)``."""
    shape = instr.shape
    if isinstance(shape, TupleShape) and len(shape.elements) >= 2:
        operands, output = shape.elements[0], shape.elements[1]
        if instr.opcode == "copy-start":  # (destination, source, context)
            return flatten_shape(output), flatten_shape(operands)[0]
        out = flatten_shape(output)
        return flatten_shape(operands), out[0] if out else None
    arrays = flatten_shape(shape)
    return [], arrays[0] if arrays else None


def offload_summary(module: HloModule) -> OffloadSummary:
    """Find every device<->host transfer of the schedule, with bytes and execution counts."""
    transfers = []
    host_buffers = sum(1 for i in module.computations[module.entry].instructions
                       if i.opcode == "parameter" and any(a.on_host for a in flatten_shape(i.shape)))
    for instr in module.scheduled():
        if instr.opcode.endswith("-done") or instr.opcode in ("parameter", "get-tuple-element", "tuple",
                                                               "bitcast", "while", "call", "conditional"):
            continue
        operand_shapes = [a for s in module.operand_shapes(instr) for a in flatten_shape(s)]
        if instr.opcode.endswith("-start"):
            sources, dest = _start_parts(instr)
            is_async = True
        else:
            sources, dest = operand_shapes, (flatten_shape(instr.shape) or [None])[0]
            is_async = False
        if dest is None:
            continue
        kind = _transfer_kind(module, instr)
        if dest.on_host:
            if kind in ("allocate", "copy"):  # a new S(5) buffer; a dynamic-update-slice writes into one
                host_buffers += 1
            if kind == "allocate":
                continue
            device_sources = [s for s in sources if not s.on_host and s.dims]
            if not device_sources:
                continue
            moved = (device_sources[0].bytes if kind == "dynamic-update-slice"
                     else dest.bytes if kind == "copy" else sum(s.bytes for s in device_sources))
            transfers.append(HostTransfer(instr.name, kind, "d2h", is_async, moved,
                                          module.executions(instr), instr.computation, transfer_engine(instr, module)))
        elif any(s.on_host for s in sources) and kind != "allocate":
            transfers.append(HostTransfer(instr.name, kind, "h2d", is_async, dest.bytes,
                                          module.executions(instr), instr.computation, transfer_engine(instr, module)))
    return OffloadSummary(host_buffers, tuple(transfers))


def transfer_engine(instr: Instruction, module: "HloModule | None" = None) -> str:
    """What moves a host transfer's bytes (see ``HostTransfer.engine``): a DMA copy, a generated kernel on the
    SMs, or XLA:TPU's DMA engines."""
    if instr.opcode in ("copy-start", "copy"):
        return "copy_engine"
    if instr.opcode in ("dynamic-slice-start", "dynamic-update-slice-start"):
        return "dma"
    if instr.opcode in ("fusion", "fusion-start"):
        if instr.attrs.get("kind") == "kCustom":  # jaxlib 0.10.2: the dynamic-slice memcpy fusion
            return "copy_engine"
        # jaxlib 0.12: the fusion stays kLoop; a wrapped slice with a memcpy descriptor (dynamic_slice_config)
        # becomes a DynamicSliceFusion thunk around a memcpy at thunk emission (the thunk_sequence dump shows it)
        root = wrapped_root(module, instr) if module is not None else None
        if root is not None and root.opcode in ("dynamic-slice", "dynamic-update-slice") \
                and root.backend_config.get("dynamic_slice_config"):
            return "copy_engine"
        return "kernel"
    return "kernel"  # an unfused dynamic-(update-)slice is a generated kernel too


def _opcodes_within(module: HloModule, callees: list[str], seen: set | None = None) -> set[str]:
    seen = set() if seen is None else seen
    found = set()
    for name in callees:
        if name in seen or name not in module.computations:
            continue
        seen.add(name)
        for i in module.computations[name].instructions:
            found.add(i.opcode)
            found |= _opcodes_within(module, i.called, seen)
    return found


def _transfer_kind(module: HloModule, instr: Instruction) -> str:
    if instr.opcode in ("copy-start", "copy"):
        return "copy"
    if instr.opcode == "custom-call" and instr.custom_call_target == "AllocateBuffer":
        return "allocate"
    if instr.opcode in ("dynamic-update-slice", "dynamic-slice"):
        return instr.opcode
    inner = _opcodes_within(module, instr.called)  # nested: dumps wrap the fusion in an async computation
    for kind in ("dynamic-update-slice", "dynamic-slice", "copy"):
        if kind in inner:
            return kind
    return _wrapped_root_opcode(module, instr) or instr.opcode


# ----------------------------------------------------------------------------- collectives

@dataclasses.dataclass(frozen=True)
class CollectiveSummary:
    counts: dict[str, int]  # opcode -> instructions in the schedule
    bytes_per_step: dict[str, int]  # opcode -> result bytes times executions

    def to_dict(self) -> dict:
        return {"counts": dict(self.counts), "bytes_per_step": dict(self.bytes_per_step)}


def collective_summary(module: HloModule) -> CollectiveSummary:
    """Count each collective once (its sync op or its ``-start``), with bytes moved per step."""
    counts: Counter = Counter()
    moved: Counter = Counter()
    for instr in module.scheduled():
        opcode, shape = instr.opcode, instr.shape
        base = collective_opcode(module, instr)
        if not base:
            continue
        if opcode == "async-start":
            shape = instr.shape.elements[1] if isinstance(instr.shape, TupleShape) else instr.shape
        elif opcode.endswith("-start") and isinstance(shape, TupleShape) and base != "all-reduce":
            shape = shape.elements[-1] if base == "collective-permute" else shape.elements[1]
        counts[base] += 1
        moved[base] += shape.bytes * module.executions(instr)
    return CollectiveSummary(dict(counts), dict(moved))
