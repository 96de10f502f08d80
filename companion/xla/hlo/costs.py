"""What a parsed module computes and moves: grouped GEMMs, FLOPs by op and phase, each op's cost and HBM bytes."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections import Counter, defaultdict

from .shapes import ArrayShape, DTYPE_BITS, TupleShape, flatten_shape
from .module import Computation, HloModule, Instruction
from .transfers import _wrapped_root_opcode, collective_opcode, offload_summary


# ----------------------------------------------------------------------------- grouped GEMMs

GROUPED_GEMM_TARGET = "offload_lab_grouped_gemm"  # the stand-in custom call of ``models.grouped_gemm``
ROUTED_EXPERTS_SCOPE = "routed_experts"  # the named scope of every MoE path's expert matmuls
GROUPED_GEMM_TILE_ROWS = 128  # rows per tile of a Hopper grouped GEMM (``targets.Gpu.grouped_gemm_tile_rows``)
_FFI_ATTR = re.compile(r'(\w+)\s*=\s*(?:"([^"]*)"|(-?\d+))')


@dataclasses.dataclass(frozen=True)
class GroupedGemm:
    """One pass of the grouped-GEMM stand-in: ``[rows, k] x [experts, k, n]`` per expert (fprop;
    dgrad and wgrad are the same product's other two sides), priced as the kernel it stands for."""

    kind: str  # fprop | dgrad | wgrad
    experts: int
    k: int  # the forward's contraction
    n: int  # the forward's output width
    routed_rows: int  # rows routed to this device under balanced routing
    expected_rows: int  # rows the kernel computes on the most-loaded device (the routing assumption)
    dtype_bytes: int

    def computed_rows(self, tile: int) -> int:
        """Rows the kernel multiplies: each expert's share of ``expected_rows`` rounded up to whole
        tiles, Σ_e ceil(m_e / tile) x tile with m_e = expected_rows / experts."""
        return self.experts * math.ceil(math.ceil(self.expected_rows / self.experts) / tile) * tile

    def flops(self, tile: int) -> float:
        return 2.0 * self.computed_rows(tile) * self.k * self.n

    @property
    def hbm_bytes(self) -> int:
        """Each routed row's activations once (both sides of the pass) and each expert's weights once."""
        return (self.expected_rows * (self.k + self.n) + self.experts * self.k * self.n) * self.dtype_bytes


def grouped_gemm(module: HloModule, instr: Instruction) -> GroupedGemm | None:
    """The grouped-GEMM pass a stand-in custom call stands for (None for any other instruction)."""
    if instr.opcode != "custom-call" or instr.custom_call_target != GROUPED_GEMM_TARGET:
        return None
    attrs = {m.group(1): m.group(2) if m.group(2) is not None else int(m.group(3))
             for m in _FFI_ATTR.finditer(instr.attrs.get("backend_config", ""))}
    operands = [flatten_shape(s)[0] for s in module.operand_shapes(instr)]
    weights = flatten_shape(instr.shape)[0] if attrs.get("kind") == "wgrad" else operands[1]
    experts, k, n = weights.dims
    return GroupedGemm(str(attrs.get("kind", "")), experts, k, n, int(attrs.get("routed_rows", 0)),
                       int(attrs.get("expected_rows", 0)), DTYPE_BITS[weights.dtype] // 8)


# ----------------------------------------------------------------------------- FLOPs and bytes

_GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8")
_NOT_KERNELS = ("parameter", "get-tuple-element", "tuple", "bitcast", "constant", "while", "call",
                "conditional", "after-all", "add-dependency", "opt-barrier", "partition-id", "replica-id")


def _dims(attr: str) -> list[int]:
    return [int(d) for d in attr.strip("{}").split(",") if d.strip()]


def dot_flops(module: HloModule, instr: Instruction, grouped_tile: int = GROUPED_GEMM_TILE_ROWS) -> float:
    """FLOPs of one execution of a dot, convolution, cuBLAS gemm or cuDNN attention custom call (2 per
    multiply-add); a grouped-GEMM stand-in counts the rows its kernel computes in ``grouped_tile``-row tiles."""
    grouped = grouped_gemm(module, instr)
    if grouped is not None:
        return grouped.flops(grouped_tile)
    operands = module.operand_shapes(instr)
    out = flatten_shape(instr.shape)[0] if flatten_shape(instr.shape) else None
    if out is None or not operands:
        return 0.0
    lhs = flatten_shape(operands[0])[0]
    if instr.opcode == "dot":
        contracting = math.prod(lhs.dims[d] for d in _dims(instr.attrs.get("lhs_contracting_dims", "{}")))
        return 2.0 * out.elements * contracting
    if instr.opcode == "custom-call" and instr.custom_call_target in _GEMM_TARGETS:
        numbers = instr.backend_config.get("gemm_backend_config", {}).get("dot_dimension_numbers", {})
        contracting = math.prod(lhs.dims[int(d)] for d in numbers.get("lhs_contracting_dimensions", []))
        return 2.0 * out.elements * contracting
    if instr.opcode == "custom-call" and instr.custom_call_target.startswith(CUDNN_ATTENTION):
        return cudnn_attention_flops(module, instr)
    if instr.opcode == "custom-call" and instr.custom_call_target == "tpu_custom_call":
        return pallas_attention_flops(module, instr)
    if instr.opcode == "convolution" and len(operands) > 1:
        return 2.0 * out.elements * _convolution_macs_per_output(instr, lhs, flatten_shape(operands[1])[0], out)
    return 0.0


_WINDOW_FIELD = re.compile(r"(size|stride|pad|lhs_dilate|rhs_dilate)=([\dx_\-]+)")


def _convolution_macs_per_output(instr: Instruction, lhs: ArrayShape, kernel: ArrayShape, out: ArrayShape) -> float:
    """Multiply-adds per output element of a convolution, averaged over the outputs: the kernel's input
    features (per group) times the window taps that land on real input elements.

    XLA:TPU writes the batch dimensions of a dot as spatial dimensions of a convolution whose window
    is mostly padding or dilation holes (``size=4x16 stride=3x15 lhs_dilate=4x16``, or ``size=1x16
    pad=0_0x15_15``): each output then reads one real element per such dimension, not the window's
    size. Counted tap by tap per spatial dimension (``_real_taps``)."""
    labels = instr.attrs.get("dim_labels", "")
    parts = re.fullmatch(r"(\w+)_(\w+)->(\w+)", labels)
    if not parts:
        return kernel.elements / max(1, out.dims[-1] if out.dims else 1)
    lhs_labels, kernel_labels, out_labels = parts.groups()
    macs = float(kernel.dims[kernel_labels.index("i")]) if "i" in kernel_labels else 1.0
    spatial = sorted(c for c in kernel_labels if c.isdigit())  # the window lists spatial dims 0, 1, ... in order
    fields = dict(_WINDOW_FIELD.findall(instr.attrs.get("window", "")))

    def per_dim(name: str, default: int) -> list[int]:
        return [int(v) for v in fields[name].split("x")] if name in fields else [default] * len(spatial)

    size = per_dim("size", 1)
    stride, lhs_dilate, rhs_dilate = per_dim("stride", 1), per_dim("lhs_dilate", 1), per_dim("rhs_dilate", 1)
    pads = [tuple(int(x) for x in p.split("_")) for p in fields["pad"].split("x")] if "pad" in fields else [(0, 0)] * len(spatial)
    for d, label in enumerate(spatial):
        n_in, n_out = lhs.dims[lhs_labels.index(label)], out.dims[out_labels.index(label)]
        macs *= _real_taps(size[d], stride[d], pads[d][0], lhs_dilate[d], rhs_dilate[d], n_in, n_out) / n_out
    return macs


@functools.lru_cache(maxsize=4096)
def _real_taps(size: int, stride: int, pad_low: int, lhs_dilate: int, rhs_dilate: int, n_in: int, n_out: int) -> int:
    """Window taps over all ``n_out`` outputs of one spatial dimension that read a real input element
    (not padding, not a hole of the input's dilation)."""
    last = (n_in - 1) * lhs_dilate
    taps = 0
    for o in range(n_out):
        for k in range(size):
            position = o * stride + k * rhs_dilate - pad_low
            taps += 0 <= position <= last and position % lhs_dilate == 0
    return taps


CUDNN_ATTENTION = "__cudnn$fmha"


def cudnn_attention_flops(module: HloModule, instr: Instruction) -> float:
    """Matmul FLOPs of cuDNN's fused attention (``__cudnn$fmha*`` custom calls; forward, or
    ``...Backward``): q ``[b, s, h, d]``, k ``[b, t, h_kv, d]``, v ``[b, t, h_kv, d_v]`` in JAX's
    BTNH layout. Forward: QK^T and PV; backward: QK^T recomputed, dV, dP, dQ and dK. A causal mask
    counts the s(s+1)/2 pairs at or below the diagonal (the tiles cuDNN skips are not work)."""
    operands = [flatten_shape(s)[0] for s in module.operand_shapes(instr)[:3]]
    if len(operands) < 3 or any(len(o.dims) != 4 for o in operands):
        return 0.0
    (b, s, h, d), (_, t, _, _), (_, _, _, dv) = (o.dims for o in operands)
    config = instr.backend_config.get("cudnn_fmha_backend_config", {})
    causal = config.get("mask_type", "") in ("CAUSAL", "PADDING_CAUSAL") and s == t
    pairs = s * (s + 1) / 2 if causal else s * t
    per_pair = (3 * d + 2 * dv) if instr.custom_call_target.endswith("Backward") else (d + dv)
    return 2.0 * b * h * pairs * per_pair


PALLAS_ATTENTION = re.compile(r"flash_mha_(fwd|bwd_dq|bwd_dkv)[\w=]*?block_k_major[=_](\d+)")
# matmuls per query-key pair of each Pallas TPU flash kernel (jax.experimental.pallas.ops.tpu.flash_attention):
# forward QK^T and PV; dK/dV kernel QK^T again, dV = P^T dO, dP = dO V^T, dK = dS^T Q; dQ kernel QK^T, dP, dQ = dS K
_PALLAS_MATMULS = {"fwd": 2, "bwd_dkv": 4, "bwd_dq": 3}


def pallas_kernel(instr: Instruction) -> tuple[str, int] | None:
    """(``fwd`` | ``bwd_dq`` | ``bwd_dkv``, block) of a Pallas TPU flash kernel's custom call; None for anything else."""
    if instr.opcode != "custom-call" or instr.custom_call_target != "tpu_custom_call":
        return None
    found = PALLAS_ATTENTION.search(instr.op_name)
    return (found.group(1), int(found.group(2))) if found else None


def pallas_attention_flops(module: HloModule, instr: Instruction) -> float:
    """Matmul FLOPs of one of the Pallas TPU flash kernels (``tpu_custom_call`` named ``flash_mha_*`` by
    its scope, ``models.flash.pallas_attention``): q ``[b, h, s, d]``, causal, whole ``block`` x ``block``
    tiles at or below the diagonal (the kernels skip the rest; the forward's own cost estimate counts
    the full square)."""
    kernel, operands = pallas_kernel(instr), module.operand_shapes(instr)
    if kernel is None or not operands:
        return 0.0
    q = flatten_shape(operands[0])[0]
    if len(q.dims) != 4:
        return 0.0
    b, h, s, d = q.dims
    block = min(kernel[1], s)
    blocks = s // block
    pairs = block * block * blocks * (blocks + 1) // 2
    return 2.0 * b * h * pairs * d * _PALLAS_MATMULS[kernel[0]]


def phase_of(op_name: str) -> str:
    """forward | backward | recompute | other, from JAX's op_name metadata."""
    if "rematted_computation" in op_name:
        return "recompute"
    if "transpose(jvp" in op_name:
        return "backward"
    if "jvp(" in op_name:
        return "forward"
    return "other"


OP_CLASSES = ("matmul", "grouped_matmul", "attention", "other_compute", "copy")


def _matmul_class(instr: Instruction) -> str:
    """The class of a matmul-doing instruction: cuDNN attention, the routed experts' matmuls (the
    grouped-GEMM stand-in, and any path's matmuls under ``ROUTED_EXPERTS_SCOPE``), or a matmul."""
    if instr.opcode == "custom-call" and instr.custom_call_target.startswith(CUDNN_ATTENTION) or pallas_kernel(instr):
        return "attention"
    if instr.custom_call_target == GROUPED_GEMM_TARGET or ROUTED_EXPERTS_SCOPE in instr.op_name:
        return "grouped_matmul"
    return "matmul"


@dataclasses.dataclass(frozen=True)
class FlopSummary:
    """Matmul FLOPs per step (dots, convolutions, gemm, attention and grouped-GEMM custom calls),
    loops by trip count: what the compiled program executes."""

    total: float
    by_phase: dict[str, float]  # forward | backward | recompute | other
    exact: bool = True  # False when conditionals or loops without a known trip count were counted
    by_class: dict[str, float] = dataclasses.field(default_factory=dict)  # matmul | grouped_matmul | attention

    @property
    def recompute(self) -> float:
        return self.by_phase.get("recompute", 0.0)

    def to_dict(self) -> dict:
        return {"total": self.total, "by_phase": dict(self.by_phase), "by_class": dict(self.by_class),
                "exact": self.exact}


def flop_summary(module: HloModule, grouped_tile: int = GROUPED_GEMM_TILE_ROWS) -> FlopSummary:
    by_phase: Counter = Counter()
    by_class: Counter = Counter()
    for instr in module.instructions():
        if instr.opcode in ("dot", "convolution", "custom-call"):
            flops = dot_flops(module, instr, grouped_tile) * module.executions(instr)
            if flops:
                by_phase[phase_of(instr.op_name)] += flops
                by_class[_matmul_class(instr)] += flops
    exact = not module.conditionals and not module.unknown_trip_count_loops
    return FlopSummary(float(sum(by_phase.values())), {k: float(v) for k, v in by_phase.items()}, exact,
                       {k: float(v) for k, v in by_class.items()})


def einsum_runs(module: HloModule, einsum: str, phase: str) -> int:
    """How many times per step the program runs the matmul JAX traced as ``einsum`` (its op name, e.g. a
    router's ``bsd,de->bse``) in ``phase``: every copy XLA made of it (loop peeling, double buffering, a
    collective pipeliner's prefetch) counted with its loop's trips."""
    return sum(module.executions(i) for i in module.instructions()
               if i.opcode in ("dot", "custom-call") and f"/{einsum}/" in i.op_name and phase_of(i.op_name) == phase
               and dot_flops(module, i))


def grouped_padding_flops(module: HloModule, grouped_tile: int = GROUPED_GEMM_TILE_ROWS) -> dict[str, float]:
    """FLOPs the grouped GEMMs compute beyond their routed rows, by phase: whole tiles per expert and the
    routing assumption's most-loaded device (``GroupedGemm.computed_rows`` against ``routed_rows``) — hardware
    work that is not model work, so that hardware = model + recompute + this + a fused attention's extra."""
    out: Counter = Counter()
    for instr in module.instructions():
        g = grouped_gemm(module, instr)
        if g is not None:
            out[phase_of(instr.op_name)] += (2.0 * (g.computed_rows(grouped_tile) - g.routed_rows) * g.k * g.n
                                             * module.executions(instr))
    return {k: float(v) for k, v in out.items()}


@dataclasses.dataclass(frozen=True)
class OpCost:
    """One kernel (or transfer, or collective) of the schedule and what it does per execution."""

    name: str
    kind: str  # compute | collective | host-transfer
    flops: float
    bytes: int  # HBM bytes read and written (operands + result)
    dtype: str  # input dtype of the op's (first) matmul, for the FLOP rate; "" without matmuls
    executions: int
    computation: str
    phase: str
    op_class: str = "other_compute"  # a compute op's class (OP_CLASSES)
    grouped_kind: str = ""  # a grouped-GEMM pass: fprop | dgrad | wgrad

    @property
    def flops_per_step(self) -> float:
        return self.flops * self.executions

    @property
    def bytes_per_step(self) -> int:
        return self.bytes * self.executions


def inner_matmuls(module: HloModule, instr: Instruction,
                   grouped_tile: int) -> tuple[float, str, Instruction | None]:
    """FLOPs of the matmuls an op runs (itself, or inside the computations it fuses), their input
    dtype, and the largest of them (None without matmuls)."""
    flops, dtype, largest = dot_flops(module, instr, grouped_tile), "", None
    if flops:
        operands = module.operand_shapes(instr)
        dtype = flatten_shape(operands[0])[0].dtype if operands else ""
        largest = instr
    if instr.opcode in ("while", "call", "conditional"):
        return flops, dtype, largest
    most = flops
    for callee in instr.called:
        comp = module.computations.get(callee)
        if comp is None:
            continue
        for inner in comp.instructions:
            f, d, big = inner_matmuls(module, inner, grouped_tile)
            flops += f
            dtype = dtype or d
            if f > most:
                most, largest = f, big
    return flops, dtype, largest


def _is_copy(module: HloModule, instr: Instruction) -> bool:
    """A device copy: ``copy``/``copy-start``, or a fusion whose root is one (layout changes, moves)."""
    return instr.opcode in ("copy", "copy-start") or (instr.opcode == "fusion"
                                                      and _wrapped_root_opcode(module, instr) == "copy")


def op_costs(module: HloModule, host_transfers: set[str] | None = None,
             grouped_tile: int = GROUPED_GEMM_TILE_ROWS, platform: str = "gpu") -> list[OpCost]:
    """Every scheduled op with its matmul FLOPs and HBM bytes per execution (roofline inputs) and
    its class; ``host_transfers``: the names of ``offload_summary(module)``'s transfers, when
    known; ``grouped_tile``: the rows per tile of the GPU's grouped GEMM; ``platform``: whose bytes rules
    (``_hbm_bytes``) apply."""
    costs = []
    if host_transfers is None:
        host_transfers = {t.name for t in offload_summary(module).transfers}
    for instr in module.scheduled():
        if instr.opcode in _NOT_KERNELS or instr.opcode.endswith("-done"):
            continue
        if instr.name in host_transfers:
            kind = "host-transfer"
        elif collective_opcode(module, instr):
            kind = "collective"
        else:
            kind = "compute"
        flops, dtype, largest = inner_matmuls(module, instr, grouped_tile)
        grouped = grouped_gemm(module, instr)
        moved = grouped.hbm_bytes if grouped is not None else _hbm_bytes(module, instr, platform)
        op_class = (_matmul_class(largest) if largest is not None
                    else "copy" if _is_copy(module, instr) else "other_compute")
        # a fusion's metadata is its root's; an op with matmuls belongs to its largest matmul's phase
        # (a recomputed projection fused into a backward op is recompute), any other op to its own
        phase = phase_of(largest.op_name if largest is not None else instr.op_name)
        costs.append(OpCost(instr.name, kind, flops, moved, dtype, module.executions(instr), instr.computation,
                            phase, op_class, grouped.kind if grouped is not None else ""))
    return costs


_IN_PLACE = ("slice", "dynamic-slice", "dynamic-update-slice", "scatter")  # ops that touch part of operand 0
TPU_VMEM_SPACE = 1  # S(1) in XLA:TPU's layouts: the TensorCore's vector memory, on the chip (S(5): pinned host)


def _nested_read(module: HloModule, comp: Computation, index: int, full: int) -> int:
    """Bytes a fusion nested in a fusion reads of its parameter ``index`` (``full`` bytes): the slices
    where its computation only slices that parameter, else all of it."""
    param = next((i for i in comp.instructions if i.opcode == "parameter" and i.operand_text == str(index)), None)
    if param is None:
        return full
    uses = [i for i in comp.instructions if param.name in i.operands]
    if uses and all(u.opcode in ("slice", "dynamic-slice") and u.operands[0] == param.name for u in uses):
        return min(full, sum(u.shape.bytes for u in uses))
    return full


def _fused_read(module: HloModule, comp: Computation, value: str, use: Instruction, full: int,
                users: dict[str, list[Instruction]]) -> int | None:
    """Bytes a fused computation ``comp`` reads of ``value`` (``full`` bytes) through ``use``, a fusion
    nested in it: what the nested computation slices of it; or, where the nested fusion is elementwise over
    ``value`` and its result is only sliced, that share of ``value`` (the fused code computes only the
    elements the slices take). None where neither holds (priced whole)."""
    nested = module.computations.get(use.called[0]) if use.called else None
    if nested is None:
        return None
    read = sum(_nested_read(module, nested, k, full) for k, o in enumerate(use.operands) if o == value)
    if read < full:
        return read
    if not _elementwise(comp, value, use):
        return None
    after = users.get(use.name, [])
    if not after or not all(u.opcode in ("slice", "dynamic-slice") and u.operands[0] == use.name for u in after):
        return None
    return min(full, int(full * sum(math.prod(u.shape.dims) for u in after) / math.prod(use.shape.dims)))


def _elementwise(comp: Computation, value: str, use: Instruction) -> bool:
    """``use`` (a nested fusion) has one array result with as many elements as ``value``."""
    if isinstance(use.shape, TupleShape) or isinstance(comp.by_name[value].shape, TupleShape):
        return False
    return math.prod(use.shape.dims) == math.prod(comp.by_name[value].shape.dims)


def _updated_in_place(comp: Computation, value: str, use: Instruction, users: dict[str, list[Instruction]]) -> list:
    """The dynamic-update-slices that update ``use`` (an elementwise nested fusion of ``value``, a layout
    change) in place, where those are its only users; else []."""
    after = users.get(use.name, [])
    if _elementwise(comp, value, use) and after and all(
            u.opcode == "dynamic-update-slice" and u.operands[0] == use.name for u in after):
        return after
    return []


def _hbm_bytes(module: HloModule, instr: Instruction, platform: str = "gpu") -> int:
    """HBM bytes an op reads and writes: its device operands and result, except that a buffer it
    only slices (slice, dynamic-slice) or updates in place (dynamic-update-slice; a scatter, whose
    operand XLA's GPU emitter updates in its output buffer) costs just the slice, or the scattered rows
    read and written. On a TPU also: buffers in the cores' VMEM (``TPU_VMEM_SPACE``) cost nothing, and a
    buffer read only inside fusions nested in the op costs what they read of it (``_fused_read``), an async
    ``slice-start`` the slice it reads, or
    nothing where a nested layout change of it is updated in place (``_updated_in_place``): XLA:TPU nests
    fusions, and its traces show the blockwise attention's fusions running at the bytes they slice, not at
    their operands' (benchmarks/bench_tpu_simulation.py). On a GPU these rules are not applied:
    no GPU measurement has tested them yet, and the stored GPU results stand as they were priced."""
    tpu = platform == "tpu"

    def in_hbm(a) -> bool:
        return not a.on_host and not (tpu and a.memory_space == TPU_VMEM_SPACE)

    if tpu and instr.opcode == "slice-start" and isinstance(instr.shape, TupleShape) and len(instr.shape.elements) > 1:
        return instr.shape.elements[1].bytes  # an async slice reads the slice it makes (into VMEM, or HBM)
    operands = module.operand_shapes(instr)
    sizes = [sum(a.bytes for a in flatten_shape(s) if in_hbm(a)) for s in operands]
    result = 0 if instr.opcode.endswith("-start") else sum(a.bytes for a in flatten_shape(instr.shape) if in_hbm(a))
    comp = module.computations.get(instr.called[0]) if instr.opcode == "fusion" and instr.called else None
    if comp is None:
        return sum(sizes) + result
    params = {i.name: int(i.operand_text) for i in comp.instructions
              if i.opcode == "parameter" and i.operand_text.isdigit()}
    users: dict[str, list[Instruction]] = defaultdict(list)
    for i in comp.instructions:
        for o in i.operands:
            users[o].append(i)
    def final_uses(value: str) -> list[tuple[str, Instruction]]:  # looking through bitcasts
        out = []
        for u in users.get(value, []):
            out += final_uses(u.name) if u.opcode == "bitcast" else [(value, u)]
        return out

    for name, index in params.items():
        pairs = final_uses(name)
        uses = [u for _, u in pairs]
        if tpu and uses and 0 <= index < len(sizes) and all(u.opcode == "fusion" for u in uses):  # nested fusions
            reads = []
            for v, u in pairs:
                updates = _updated_in_place(comp, v, u, users)
                reads.append(0 if updates else _fused_read(module, comp, v, u, sizes[index], users))
                for update in (x for x in updates if x.is_root):  # as the output only the update is written
                    written = comp.by_name.get(update.operands[1])
                    result -= update.shape.bytes - (written.shape.bytes if written is not None else 0)
            if all(r is not None for r in reads):
                sizes[index] = min(sizes[index], sum(reads))
            continue
        if uses and 0 <= index < len(sizes) and all(u.opcode in _IN_PLACE and u.operands and u.operands[0] == v
                                                   for v, u in pairs):
            sliced = 0
            for u in uses:
                if u.opcode in ("slice", "dynamic-slice"):
                    sliced += u.shape.bytes
                elif u.opcode == "dynamic-update-slice":  # not read; as the output only the update is written
                    update = comp.by_name.get(u.operands[1])
                    if u.is_root:
                        result -= u.shape.bytes - (update.shape.bytes if update is not None else 0)
                elif len(u.operands) == 3 and not isinstance(u.shape, TupleShape):  # scatter: rows read and written
                    update = comp.by_name.get(u.operands[2])
                    touched = update.shape.bytes if update is not None and not isinstance(update.shape, TupleShape) else 0
                    sliced += touched
                    if u.is_root:
                        result -= u.shape.bytes - touched
                else:  # a variadic scatter: priced whole
                    sliced += sizes[index]
            sizes[index] = sliced
    return sum(sizes) + max(result, 0)
