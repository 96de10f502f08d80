"""Steps measured on a real chip, as stored (``benchmarks/results/measured.json``) and read back.

``benchmarks/bench_measured.py`` runs the lab's steps on the lent TPU v5e in parts (kernels, the grid in
one process, a subset of it again in separate processes); ``merge`` joins the parts into one record per
step: XLA:TPU's verdict and memory analysis on the chip, the timed calls of the first process, every
process's median and the run-to-run spread across them, the runtime's counters and the footprint they
give (``measure.runtime_footprint``), the reduced profiler trace; with the kernel microbenchmarks, the
memory probe and the A/B checks beside.
``load`` reads it back as ``Measurements`` for tests and benchmarks, which have no chip.

The stored file carries the measuring run's environment (device kind, jax, jaxlib, libtpu, the lab's
commit and ``results.stamp()``): a measurement is a fact about the program that commit compiled, so a
later source change does not make it stale the way a compiled or simulated result is (``results.load``);
it makes the comparison with a *new* prediction the thing to redo.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
from pathlib import Path

from . import measure
from .. import models

# The measured grid's model and policies (benchmarks/bench_measured.py runs them; ``remeasure`` runs one again).
QKV = ("query_proj", "key_proj", "value_proj")
MLP = ("mlpwi_0", "mlpwi_1", "mlpwo")
POLICIES = {  # the grid's policy names -> a MaxText preset or a per-tensor custom policy
    "full": "full",
    "minimal": "minimal",
    "qkv_device": "save_qkv_proj",
    "qkv_offload": "qkv_proj_offloaded",
    "mlp_device": dict.fromkeys(MLP, "device"),
    "mlp_offload": dict.fromkeys(MLP, "offload"),
    "context_device": dict.fromkeys(("context", *QKV), "device"),
    "context_offload": dict.fromkeys(("context", *QKV), "offload"),
    "input_offload": {"decoder_layer_input": "offload"},
    "minimal_offloaded": "minimal_offloaded",
}


def grid_model(layers: int) -> models.ModelConfig:
    """The grid's model: Llama 3's layer (GQA, RoPE at theta 500,000, SwiGLU) at 1B-class width."""
    return models.config("llama3-8b").replace(name=f"tpu-llama-{layers}L", num_layers=layers, d_model=2048,
                                              num_heads=16, num_kv_heads=8, head_dim=128, mlp_dim=8192,
                                              vocab_size=32_000)

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "measured.json"
USABLE_HBM_BYTES = 16_911_433_728  # what XLA:TPU's compile reports as v5e's usable HBM (a refusal carries no compile)


TRACE_FIELDS = ("trace", "trace_ops")  # a step's reduced profiler trace, and every op's seconds per step


def _session(environment: dict) -> str:
    """The key of the code a part ran: its stamp's (``freshness`` rule 2), or the source hash rule 1 stamped."""
    stamp = environment["stamp"]
    return stamp.get("code") or stamp["companion_source"]


def merge(parts: list[dict], step_defaults: dict | None = None, notes: tuple[str, ...] = ()) -> dict:
    """One measured record from the parts ``bench_measured.py`` wrote (any order): the first grid
    process's record of each step, with every process's median and their spread. ``step_defaults`` fill
    step fields a part's code did not yet record (said in ``notes``, stored with the result); the kernels are
    the newest kernels part's, the per-op overhead the newest overhead part's; a step's trace (and its ops'
    seconds) is kept from whichever process traced it."""
    grids = sorted((p for p in parts if p.get("part") in ("grid", "fresh", "largest")), key=lambda p: p.get("process", 1))
    kernels = max((p for p in parts if p.get("part") == "kernels"), key=lambda p: p["environment"]["date"], default={})
    overhead = max((p for p in parts if p.get("part") == "overhead"), key=lambda p: p["environment"]["date"], default={})
    if not grids:
        raise ValueError("merge needs at least one grid part (bench_measured.py --part grid)")
    steps: dict[str, dict] = {}
    medians: dict[str, dict[str, float]] = {}
    for part in grids:
        session = _session(part["environment"])[:8]  # a process is one of a session's
        for record in part.get("steps", []):
            key = record["key"]
            if "timing" in record:
                medians.setdefault(key, {})[f"{session}/{part.get('process', 1)}"] = record["timing"]["median"]
            if key not in steps or ("timing" not in steps[key] and "timing" in record):
                steps[key] = {**dict(record), **{f: steps[key][f] for f in TRACE_FIELDS if f in steps.get(key, {})}}
            else:  # traced in a later process
                steps[key].update({f: record[f] for f in TRACE_FIELDS if f in record and f not in steps[key]})
    for key, record in steps.items():
        record["step"] = {**(step_defaults or {}), **record["step"]}
        record.pop("trace_file", None)  # a path on the measuring machine
        by_process = medians.get(key, {})
        record["process_medians"] = dict(sorted(by_process.items()))
        record["spread"] = measure.spread(list(by_process.values())) if len(by_process) >= 2 else None
    ab = [row for part in parts for row in part.get("ab", [])]
    sessions: dict[str, dict] = {}  # each session's environment as its first part recorded it
    for part in sorted(parts, key=lambda p: p["environment"]["date"]):
        sessions.setdefault(_session(part["environment"]), part["environment"])
    return {"environment": grids[0]["environment"], "sessions": sorted(sessions.values(), key=lambda e: e["date"]),
            "notes": list(notes), "kernels": kernels.get("kernels"),
            "memory_probe": kernels.get("memory_probe"), "op_overhead": overhead.get("op_overhead"),
            "steps": list(steps.values()), "ab": ab}


@dataclasses.dataclass(frozen=True)
class MeasuredStep:
    """One step as measured (see ``merge``)."""

    key: str
    layers: int
    batch: int
    seq: int
    policy: str
    optimizer_offload: bool
    flags: str | None
    flash_kernel: str  # fused (Pallas on a TPU) | jax (the lab's blockwise kernel)
    runs: bool
    seconds: float | None  # the first process's median
    spread: float | None  # across processes, where repeated
    compiled_peak_bytes: int | None  # XLA:TPU's memory analysis on the chip
    needed_bytes: int | None  # what XLA:TPU said it needed when it refused
    footprint_bytes: int | None  # the runtime's buffers in use + the program's reservation after the step ran
    host_bytes: int | None
    fresh: bool  # measured after the band it tests was fixed (bench_measured.FRESH): only ever reported
    record: dict = dataclasses.field(repr=False, compare=False)

    @property
    def op_seconds(self) -> dict[str, float]:
        """Each op's seconds per step as the chip's profiler saw them, by its HLO name (traced steps; else empty)."""
        return {name.lstrip("%"): s for name, s in self.record.get("trace_ops", {}).get("seconds_per_step", {}).items()}

    @classmethod
    def from_record(cls, record: dict) -> "MeasuredStep":
        step, compiled = record["step"], record.get("compile", {})
        footprint = measure.runtime_footprint(record.get("memory_stats_after") or {})
        return cls(record["key"], step["layers"], step["batch"], step["seq"], step["policy"],
                   step["optimizer_offload"], step["flags"], step.get("flash_kernel", "fused"),
                   record["verdict"]["status"] == "runs",
                   record.get("timing", {}).get("median"), record.get("spread"), compiled.get("peak_bytes"),
                   compiled.get("needed_bytes") or record["verdict"].get("needed_bytes"), footprint,
                   compiled.get("host_bytes"), step.get("fresh", False), record)


@dataclasses.dataclass(frozen=True)
class Measurements:
    environment: dict  # the first session's
    sessions: tuple[dict, ...]  # each session's environment (device kind, versions, source, commit, date)
    notes: tuple[str, ...]
    steps: tuple[MeasuredStep, ...]
    kernels: dict | None
    memory_probe: dict | None
    ab: tuple[dict, ...]

    def step(self, key: str) -> MeasuredStep:
        for s in self.steps:
            if s.key == key:
                return s
        raise KeyError(f"no measured step {key!r}")

    @property
    def spread(self) -> float:
        """The largest run-to-run spread across processes of any repeated step: the measured ratios'
        noise floor (a measured difference under it is no ranking)."""
        values = [s.spread for s in self.steps if s.spread is not None]
        return max(values) if values else float("nan")

    def median_spread(self) -> float:
        values = [s.spread for s in self.steps if s.spread is not None]
        return statistics.median(values) if values else float("nan")


def boundary_rows(m: Measurements, within: float = 0.05) -> list[dict]:
    """The steps within ``within`` of usable HBM (compiled peak, or the bytes XLA:TPU said it needed), and
    what the chip did with each."""
    rows = []
    for s in m.steps:
        usable = s.record.get("compile", {}).get("usable_hbm_bytes") or USABLE_HBM_BYTES
        peak = s.compiled_peak_bytes or s.needed_bytes
        if abs(peak / usable - 1) <= within:
            rows.append({"step": s.key, "compiled GiB": peak / 2**30, "of usable": f"{peak / usable:.2%}",
                         "chip": "ran" if s.runs else "refused" if s.record["verdict"].get("needed_bytes") and not
                         s.compiled_peak_bytes else "not run (over the limit)",
                         "footprint GiB": s.footprint_bytes / 2**30 if s.footprint_bytes else None})
    return rows


SWEEP = ((8, 2048), (4, 4096), (2, 8192), (1, 16384), (1, 32768))  # (batch, sequence): the grid's S sweep


def sequence_sweep(m: Measurements, slower: str = "context_offload", faster: str = "context_device") -> list[dict]:
    """``slower`` over ``faster`` at each sequence length of the grid's S sweep (the lab's blockwise
    attention), and whether ``faster`` fit at all."""
    rows = []
    for a in m.steps:
        if a.policy != slower or a.flash_kernel != "jax" or a.flags or a.optimizer_offload or (a.batch, a.seq) not in SWEEP:
            continue
        b = next((s for s in m.steps if (s.layers, s.batch, s.seq, s.flash_kernel, s.flags, s.optimizer_offload)
                  == (a.layers, a.batch, a.seq, a.flash_kernel, a.flags, a.optimizer_offload) and s.policy == faster), None)
        if b is None:
            continue
        rows.append({"S": a.seq, "B": a.batch, "layers": a.layers, f"{slower} ms": a.seconds * 1e3 if a.runs else None,
                     f"{faster} ms": b.seconds * 1e3 if b.runs else None,
                     "ratio": a.seconds / b.seconds if a.runs and b.runs else None})
    return sorted(rows, key=lambda r: r["S"])


def held_out(key: str) -> bool:
    """The split of the measured grid, fixed before the simulator was first held against it: a step whose
    key's SHA-256 is odd is held out (only ever reported), the others may inform modelling choices. A
    pair is held out when either of its steps is. The fresh steps (``MeasuredStep.fresh``) are a third
    group beside both halves."""
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % 2 == 1


def remeasure(m: "Measurements", key: str, steps: int = 5) -> dict:
    """Stored step ``key`` run again on this machine's chip (``measure.train_step``), beside the stored median,
    with the versions that differ from the session that stored it. Without an accelerator: ``measure``'s
    one-line refusal."""
    import jax
    import jaxlib

    from ..compiling import compiler
    from ..hardware import libtpu, targets
    from ..compiling import train

    measure.require_accelerator()
    step = m.step(key)
    cfg = grid_model(step.layers).replace(flash_kernel=step.flash_kernel)
    trainer = train.trainer(cfg, POLICIES[step.policy],
                            state=train.StateConfig(optimizer_memory_host_offload=step.optimizer_offload))
    placement = compiler.place(targets.target("tpu-v5e"))
    record = measure.train_step(trainer, placement, step.batch, step.seq, flags=step.flags, steps=steps)
    here = {"device_kind": jax.devices()[0].device_kind, "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "libtpu": libtpu.version()}
    stored = m.environment
    return {"key": step.key, "stored_seconds": step.seconds, "seconds": record.get("timing", {}).get("median"),
            "verdict": record["verdict"]["status"], "versions_differ": {k: (stored.get(k), v) for k, v in here.items()
                                                                       if stored.get(k) not in (None, v)}}


def load(path: str | Path = RESULTS) -> Measurements:
    data = json.loads(Path(path).read_text())
    return Measurements(data["environment"], tuple(data.get("sessions", [data["environment"]])), tuple(data.get("notes", ())),
                        tuple(MeasuredStep.from_record(r) for r in data["steps"]),
                        data.get("kernels"), data.get("memory_probe"), tuple(data.get("ab", [])))


COMPILE_ONLY = RESULTS.with_name("measured_compile_only.json")


@dataclasses.dataclass(frozen=True)
class Agreement:
    """One measured step's XLA:TPU memory analysis on the chip beside the same program compiled here with
    libtpu's compile-only topology (``bench_measured.py --compile-only``)."""

    key: str
    chip_fits: bool
    here_fits: bool
    chip_peak_bytes: int | None  # the compiled peak (or, refused, the bytes XLA:TPU said it needed)
    here_peak_bytes: int | None

    @property
    def same_verdict(self) -> bool:
        return self.chip_fits == self.here_fits

    @property
    def peak_difference(self) -> float | None:
        if not self.chip_peak_bytes or not self.here_peak_bytes:
            return None
        return self.here_peak_bytes / self.chip_peak_bytes - 1


def compile_agreement(m: Measurements, compile_only: str | Path = COMPILE_ONLY) -> list[Agreement]:
    """Every measured step that was also compiled here, chip against compile-only."""
    here = {row["key"]: row for row in json.loads(Path(compile_only).read_text())["steps"]}
    return [Agreement(s.key, s.runs, here[s.key]["fits"], s.compiled_peak_bytes or s.needed_bytes,
                      here[s.key].get("peak_bytes") or here[s.key].get("needed_bytes"))
            for s in m.steps if s.key in here]
