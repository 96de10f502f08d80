"""The planner: the meshes and flag sets it tries, the search over per-tensor choices and batches, its pick and why."""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ...timing import bands
from ...hardware import fit
from ...memory import budget as budget_lib
from ...compiling import compiler
from ...timing import schedule
from ...ground import sharding
from ...compiling import train
from ...timing import workaround
from ...hardware.fit import HOST_RAM_SHARE, host_limit_bytes
from ...hardware import flags as xla_flags
from ...models import configs as model_configs
from ...hardware.targets import GiB, Target

from .largest import CONTENDERS, MAX_PER_SHARD, _largest, budget_keeps, plan_margin
from .candidates import (
    CARRY, Candidate, Checked, PIPELINED_FLAG, Plan, STATE_CHOICES, TensorChoice, _mesh_text, estimate_seconds
)


def default_mesh(cfg, target: Target) -> tuple[dict[str, int], str]:
    """The mesh a command uses when none is given, and why: all-FSDP for a dense model; for a MoE model,
    expert parallelism inside one NVLink domain (the largest power of two up to 64 that fits the domain,
    divides the experts and the GPUs: EP 64 for DeepSeek-V3 on 256 GB200, 8 on H100 boards) and FSDP over
    the rest — all-FSDP would gather every expert's weights in every MoE layer."""
    from ...timing import collectives

    n = target.num_devices
    if cfg.moe is None:
        return sharding.parse_mesh(None, n), "all-FSDP (the default for a dense model)"
    domain = min(target.fabric.nvlink_domain, n)
    ep = next((e for e in (64, 32, 16, 8, 4, 2) if e <= domain and n % e == 0 and cfg.moe.num_experts % e == 0), 1)
    if ep == 1:
        return sharding.parse_mesh(None, n), "all-FSDP (no expert split fits an NVLink domain here)"
    mesh = sharding.parse_mesh({"fsdp": n // ep, "expert": ep}, n)
    return mesh, (f"mesh {_mesh_text(mesh)}: expert parallelism inside one NVLink domain ({domain} GPUs), FSDP over "
                  f"the rest (all-FSDP would gather all {cfg.moe.num_experts} experts' weights in every MoE layer); "
                  "--mesh chooses another")


def mesh_candidates(cfg, target: Target) -> list[dict[str, int]]:
    """The meshes the planner tries when none is given: all-FSDP, and FSDP with tensor parallelism
    inside a host (dense models: 2, 4, 8 ways where the KV heads split) or expert parallelism (MoE:
    8 to 64 ways where the experts split)."""
    n, per_host = target.num_devices, target.topology.gpus_per_host
    meshes = [sharding.parse_mesh(None, n)]
    if cfg.moe is None:
        for t in (2, 4, 8):
            if t <= per_host and n % t == 0 and n > t and cfg.num_kv_heads % t == 0:
                meshes.append(sharding.parse_mesh({"fsdp": n // t, "tensor": t}, n))
    else:
        for e in (8, 16, 32, 64):
            if n % e == 0 and n > e and cfg.moe.num_experts % e == 0:
                meshes.append(sharding.parse_mesh({"fsdp": n // e, "expert": e}, n))
    return meshes


def _order(cfg, seq: int, mesh, target: Target) -> tuple[list[str], dict, list[TensorChoice]]:
    """The model's named tensors, greedily ordered by the recompute saving each spares per byte (given
    those before it), at one sequence per batch shard; and the names saving never helps."""
    batch = sharding.batch_ways(mesh)
    sizes = {t.name: t for t in budget_lib.tensor_tradeoffs(cfg, batch, seq, mesh)}

    def recompute(saved) -> float:
        return budget_lib.estimate(cfg, batch, seq, {n: "device" for n in saved}, mesh, target=target).recompute_flops

    order, info, left = [], {}, [n for n, t in sizes.items() if t.recompute_flops_per_layer > 0]
    current = recompute(order)
    while left:
        gains = {n: current - recompute(order + [n]) for n in left}
        best = max(left, key=lambda n: (gains[n] / sizes[n].bytes_per_layer, gains[n]))
        if gains[best] <= 0:
            break
        order.append(best)
        info[best] = gains[best] / sizes[best].layers
        left.remove(best)
        current -= gains[best]
    never = [TensorChoice(n, t.bytes_per_layer, t.layers, 0.0, 0.0, 0.0, "remat", _NO_GAIN.get(n, _NO_GAIN[None]))
             for n, t in sizes.items() if n not in order]
    return order, {n: (sizes[n], info[n]) for n in order}, never


_NO_GAIN = {"context": "saving it spares nothing: flash attention reruns its kernel in the backward pass anyway",
            None: "saving it spares nothing: the backward pass reads no value computed from it"}


def preset_specs(cfg) -> list[tuple[tuple[str, str], ...]]:
    """MaxText's presets as search specs on ``cfg``'s names (the saved names and where; the rest recomputed).

    The greedy order's prefixes do not hold them all: ``qkv_proj_offloaded`` keeps the attention projections
    without the MLP's, and on the first decision set (D2560-L4-S32768 with the moments on the host) it ran at
    batch 2 and 4 % faster on the chip than every prefix the planner compiled. A user weighs the presets
    first; so does the search."""
    from ... import models
    from ...ground import policies

    emitted = models.checkpoint_names(cfg)
    out: list[tuple[tuple[str, str], ...]] = []
    for name, preset in policies.PRESETS.items():
        spec = tuple((n, where) for n, where in preset.touched(emitted).items() if where != "remat")
        if spec not in out:
            out.append(spec)
    return out


def _flag_sets(flags, target: Target | None = None):
    """The flag sets a candidate compiles with, by whether it pipelines its host offload. A TPU's are libtpu's
    (``libtpu.resolve``): XLA:TPU has no pipelined host offloading to turn on, so both are the same set."""
    if target is not None and target.is_tpu:
        from ...hardware import libtpu

        base = libtpu.resolve(flags)
        return {True: base, False: base}
    base = xla_flags.resolve(flags)
    on = xla_flags.resolve(f"{base.xla_flags()} --{PIPELINED_FLAG}=true".strip())
    off = xla_flags.resolve(f"{base.xla_flags()} --{PIPELINED_FLAG}=false".strip())
    return {True: on, False: off}


@dataclasses.dataclass(frozen=True)
class Search:
    """The budget stage of the planner: candidates that fit, best estimated throughput first."""

    config: model_configs.ModelConfig
    target: Target
    seq: int
    ranked: tuple[tuple[dict, Candidate], ...]  # (mesh, candidate)
    orders: dict = dataclasses.field(repr=False)  # per mesh: the tensors' greedy order and what each spares
    searched: int  # candidates the budget evaluated
    seconds: float
    usable_hbm_bytes: int
    host_limit_bytes: int
    flag_sets: dict = dataclasses.field(repr=False)  # pipelined offload on / off

    def overrides(self, rank: int = 0) -> dict:
        """A ranked candidate as MaxText overrides (budget only: ``plan`` compiles before it answers)."""
        from .. import maxtext

        m, c = self.ranked[rank]
        t = self.target
        return maxtext.overrides(self.config, c.policy, c.batch, self.seq, m, t.num_devices,
                                 t.topology.gpus_per_host, c.state)


def search(model, target: Target, seq: int, mesh: Mapping[str, int] | str | None = None, *,
           global_batch: int | None = None, host_pool_gib: int | None = None, flags=None,
           states=STATE_CHOICES) -> Search:
    """The planner's first stage, no compile: every candidate (per-tensor remat/device/offload, the scan
    carry kept or offloaded, pipelined offload, the state levers) at the largest batch the budget fits
    under usable HBM (less ``BUDGET_MARGIN``) and the host limit, ranked by ``estimate_seconds``.

    ``mesh``: one mesh, or None to try ``mesh_candidates``. ``global_batch``: fixed (the planner then
    chooses gradient accumulation 1, 2, 4 or 8), or None (the largest each candidate fits, no
    accumulation). ``host_pool_gib``: the pinned pool you will give XLA, or None to let the plan size it
    up to ``HOST_RAM_SHARE`` of the host RAM behind each GPU (shared where it is shared).
    """
    import time

    t0 = time.perf_counter()
    cfg = model_configs.config(model)
    n = target.num_devices
    if mesh is None:
        meshes = mesh_candidates(cfg, target)
    else:
        meshes = [sharding.parse_mesh(dict(mesh) if isinstance(mesh, Mapping) else mesh, n)]
    host_limit = host_limit_bytes(target, host_pool_gib * GiB if host_pool_gib is not None else None)
    usable = target.usable_hbm_bytes
    flag_sets = _flag_sets(flags, target)
    accums = (1,) if global_batch is None else (1, 2, 4, 8)
    searched = 0
    feasible: list[tuple[dict, Candidate]] = []
    orders = {}
    for m in meshes:
        ways = sharding.batch_ways(m)
        order, _, _ = orders[tuple(m.items())] = _order(cfg, seq, m, target)
        # save the first k of the order; of those, offload the last j (HBM holds the rest)
        specs = [tuple((name, "offload" if i >= k - j else "device") for i, name in enumerate(order[:k]))
                 for k in range(len(order) + 1) for j in range(k + 1)]
        specs += [s for s in preset_specs(cfg) if frozenset(s) not in {frozenset(t) for t in specs}]
        specs += [spec + ((CARRY, "offload"),) for spec in specs if CARRY not in dict(spec)]  # the carry: kept, or offloaded
        for spec in specs:
            # a TPU's offload is never pipelined: XLA:TPU has no such pass to turn on (``_flag_sets``)
            pipelined = any(w == "offload" for _, w in spec) and not target.is_tpu
            for base_state in states:
                for accum in accums:
                    state = dataclasses.replace(base_state, gradient_accumulation_steps=accum)
                    step = ways * accum
                    memo: dict[int, budget_lib.Budget | None] = {}

                    def budget_at(batch: int):
                        nonlocal searched
                        if batch not in memo:
                            searched += 1
                            try:
                                memo[batch] = budget_lib.estimate(cfg, batch, seq, dict(spec), m, target=target,
                                                                  state=state, flags=flag_sets[pipelined])
                            except ValueError:
                                memo[batch] = None
                        return memo[batch]

                    def fits(batch: int) -> bool:
                        b = budget_at(batch)
                        return (b is not None and budget_keeps(cfg, b.device_bytes, usable)
                                and b.host_bytes <= host_limit)

                    if global_batch is not None:
                        batch = global_batch if global_batch % step == 0 and fits(global_batch) else 0
                    else:
                        batch = _largest(fits, step)
                    if not batch:
                        continue
                    feasible.append((m, _priced(Candidate(spec, batch, pipelined, state, 0, 0, 0.0, 0.0, 0.0),
                                                budget_at(batch), cfg, target, m, seq)))
    if not feasible:
        raise ValueError(f"no configuration of {cfg.name} fits {target.name} at S={seq} by the budget (usable HBM "
                         f"{usable / GiB:.1f} GiB at XLA_PYTHON_CLIENT_MEM_FRACTION={target.mem_fraction:g}, host "
                         f"{host_limit / GiB:.0f} GiB per GPU): try more GPUs, a shorter sequence, a tensor or "
                         "expert axis (--mesh) or a larger --mem-fraction")
    feasible.sort(key=lambda mc: -mc[1].estimated_tokens_per_second)
    return Search(cfg, target, seq, tuple(feasible), orders, searched, time.perf_counter() - t0, usable, host_limit,
                  flag_sets)


def plan(model, target: Target, seq: int, mesh: Mapping[str, int] | str | None = None, *,
         global_batch: int | None = None, host_pool_gib: int | None = None, max_compiles: int = 4,
         flags=None, states=STATE_CHOICES, progress=None, margin: fit.Margin | None = None,
         processes_per_node: int = 1, for_jaxlib: str | None = None) -> Plan:
    """Search per-tensor remat/device/offload, batch, pipelined offload and the state levers for the
    most simulated throughput that fits (``search``); compile and simulate the best few and full remat beside them
    (``_remat_baseline``), keep the fastest whose compiled peak fits, and prove its batch the largest that compiles
    (``_further``).

    ``mesh``: one mesh, or None to try ``mesh_candidates``. ``global_batch``: fixed (the planner then
    chooses gradient accumulation 1, 2, 4 or 8), or None (the largest each candidate fits, no
    accumulation). ``host_pool_gib``: the pinned pool you will give XLA, or None to let the plan size it
    up to ``HOST_RAM_SHARE`` of the host RAM behind each GPU (shared where it is shared). ``margin``: the
    device headroom a finalist's compiled peak must leave (None: ``plan_margin``, the target's). ``processes_per_node`` (the launcher layout)
    and ``for_jaxlib`` shape the export (``Plan.pinned_pool``, ``flags.export``).
    """
    import time

    if not isinstance(processes_per_node, int) or not 1 <= processes_per_node <= target.topology.gpus_per_host:
        raise ValueError(f"processes_per_node {processes_per_node!r}: choose 1 (one per node, MaxText's "
                         f"gpu_multi_process_run.sh) to {target.topology.gpus_per_host} (one per GPU)")
    if for_jaxlib is not None:
        xla_flags.export(xla_flags.resolve(flags), for_jaxlib=for_jaxlib)  # a bad version fails before the search
    margin = plan_margin(target) if margin is None else margin
    t0 = time.perf_counter()
    found = search(model, target, seq, mesh, global_batch=global_batch, host_pool_gib=host_pool_gib, flags=flags,
                   states=states)
    cfg, feasible, orders, flag_sets = found.config, list(found.ranked), found.orders, found.flag_sets
    usable, host_limit, n = found.usable_hbm_bytes, found.host_limit_bytes, target.num_devices
    checked: list[tuple[dict, Checked]] = []

    def check(m, c):
        if progress:
            progress(f"compiling {c.label()} on mesh {_mesh_text(m)}")
        checked.append((m, _check(cfg, target, seq, m, c, flag_sets[c.pipelined], margin, host_limit,
                                  grow=global_batch is None)))
        return checked[-1][1]

    fits = _compile_kinds(feasible, check, cfg, target, seq, flag_sets, usable - margin.of(usable), max_compiles)
    baseline = _remat_baseline(checked, cfg, target, seq, flag_sets)
    if baseline is not None and max_compiles > 1:
        check(*baseline)
    if not fits:  # before giving up: the least memory the search found, at its smallest batch
        check(*_least_memory(feasible, cfg, target, seq, flag_sets))
    twin = next(((m, k.candidate) for m, k in checked if k.fits and k.candidate.pipelined), None)
    if twin is not None and max_compiles > 1:  # the same plan without pipelined offload, for comparison
        m, c = twin
        b = budget_lib.estimate(cfg, c.batch, seq, c.policy, m, target=target, state=c.state, flags=flag_sets[False])
        check(m, _priced(dataclasses.replace(c, pipelined=False), b, cfg, target, m, seq))
    fitting = [(m, k) for m, k in checked if k.fits]
    if not fitting:
        raise ValueError(f"none of the {len(checked)} finalists of {cfg.name} on {target.name} fits once compiled "
                         f"with a {margin.of(usable) / GiB:.2f} GiB margin (the closest: "
                         f"{min(k.device_bytes for _, k in checked) / GiB:.1f} GiB of {usable / GiB:.1f} usable): try a "
                         "larger --max-compiles, more GPUs or a smaller --margin-gib")
    (mesh_, best), tie_break = _choose(fitting)
    if global_batch is None and max_compiles > 1:  # the pick's batch, proven the largest that compiles
        further = _further(cfg, target, seq, mesh_, best, flag_sets[best.candidate.pipelined], margin, host_limit,
                           progress)
        checked += [(mesh_, k) for k in further]
        if any(k.fits for k in further):
            (mesh_, best), tie_break = _choose([(m, k) for m, k in checked if k.fits])
    light = {id(k): dataclasses.replace(k, report=None) for _, k in checked}  # the compiles are not kept: GiBs at 671B
    best = light[id(best)]
    tensors = _explain(cfg, best.candidate, mesh_, seq, *orders[tuple(mesh_.items())], target)
    return Plan(cfg.name, target.name, n, target.topology.gpus_per_host, seq, mesh_, target.mem_fraction, usable,
                host_limit, best, tuple(light[id(k)] for _, k in checked), tuple(tensors), found.searched, len(feasible),
                found.seconds, time.perf_counter() - t0, flag_sets[best.candidate.pipelined], cfg,
                margin.of(usable), tie_break, processes_per_node, for_jaxlib, "tpu" if target.is_tpu else "gpu")


def _compile_kinds(feasible, check, cfg, target: Target, seq: int, flag_sets, room: int, max_compiles: int) -> int:
    """Compile the best of each kind (mesh, offload or not, state levers) in the budget's order until enough fit;
    how many fitted. Each at the largest batch whose budget, scaled by its kind's miss so far (compiled / predicted;
    a kind not yet compiled takes its mesh's smallest), fits the ``room`` (``_shrunk``); a kind that did not fit is
    tried again with its next candidate, one that fitted is done. Misses differ by kind (on a TPU, 10 % for full
    remat, 30 % with the parameters on the host): one mesh-wide miss once ruled out a shape's only fitting one."""
    tried, fits, miss = {}, 0, {}  # (mesh, offloads, state) -> fitted; -> compiled / predicted, the largest
    compiled = 0

    def miss_of(key) -> float:
        return miss.get(key) or min((v for k, v in miss.items() if k[0] == key[0]), default=1.0)

    for m, c in feasible:
        key = (tuple(m.items()), c.offloads, c.state)
        if tried.get(key):
            continue
        c = _shrunk(cfg, target, seq, m, c, flag_sets[c.pipelined], miss_of(key), room)
        if c is None:
            continue
        done = check(m, c)
        compiled += 1
        tried[key] = tried.get(key, False) or done.fits
        fits += done.fits
        miss[key] = max(miss.get(key, 1.0), done.device_bytes / done.candidate.device_bytes)
        if fits >= max(1, max_compiles - 1) or compiled >= 2 * max_compiles:
            break
    return fits


def _least_memory(feasible, cfg, target: Target, seq: int, flag_sets) -> tuple[dict, Candidate]:
    """The candidate the budget puts lowest at its smallest batch, priced there: the planner's last try."""
    def smallest(mc):
        m, c = mc
        step = sharding.batch_ways(m) * c.state.gradient_accumulation_steps
        return budget_lib.estimate(cfg, step, seq, c.policy, m, target=target, state=c.state,
                                   flags=flag_sets[c.pipelined])

    m, c = min(feasible, key=lambda mc: smallest(mc).device_bytes)
    step = sharding.batch_ways(m) * c.state.gradient_accumulation_steps
    return m, _priced(dataclasses.replace(c, batch=step), smallest((m, c)), cfg, target, m, seq)


def _remat_baseline(checked, cfg, target: Target, seq: int, flag_sets) -> tuple[dict, Candidate] | None:
    """What every pick must beat, compiled where no finalist is it: full remat (MaxText's default) on the fastest
    fitting finalist's mesh, state levers and batch (``_check`` then steps up while the budget is loose). None where
    nothing fits or full remat with those levers is already a finalist.

    Why it is compiled, not ranked: on two shapes of the first decision set the chip ran full remat at the pick's
    batch 6-9 % faster than the pick (an MLP offload: the v5e's host link is slow beside its compute), and the
    simulator had ranked it first, but the search never compiled it there. The budget cannot place it: XLA:TPU
    rematerializes on its own near the limit, so full remat with the moments on the host compiled to 15.56 GiB at
    batch 1 and to 14.76 GiB at batch 3 (D4096-L2-S8192); the pick's batch is where the comparison means most."""
    fitting = [(m, k) for m, k in checked if k.fits]
    if not fitting:
        return None
    m, best = max(fitting, key=lambda mk: mk[1].tokens_per_second)
    state, batch = best.candidate.state, best.candidate.batch
    if any(not k.candidate.spec and k.candidate.state == state and n == m for n, k in checked):
        return None
    b = budget_lib.estimate(cfg, batch, seq, {}, m, target=target, state=state, flags=flag_sets[False])
    return m, _priced(Candidate((), batch, False, state, 0, 0, 0.0, 0.0, 0.0), b, cfg, target, m, seq)


def _simplicity(c: Candidate) -> tuple[int, int]:
    """Fewer moving parts first: no pipelining, then fewer tensors offloaded."""
    return (int(c.pipelined), sum(where == "offload" for _, where in c.spec))


def _choose(fitting: list[tuple[dict, "Checked"]]) -> tuple[tuple[dict, "Checked"], str]:
    """The finalist with the most simulated tokens/s; those tied with it under the paired band (swept only
    within ``CONTENDERS`` of it) go to the larger device margin, then the simpler plan. Returns the choice
    and why, in words."""
    top = max(fitting, key=lambda mk: mk[1].tokens_per_second)
    contenders = [mk for mk in fitting if mk is not top and mk[1].tokens_per_second >= CONTENDERS * top[1].tokens_per_second]
    if not contenders:
        return top, "the most simulated tokens/s"
    swept = {id(mk): bands.sweep(mk[1].report) for mk in [top, *contenders]}
    tied = [mk for mk in contenders if bands.rank(swept[id(mk)], swept[id(top)]).tie]
    if not tied:
        return top, "the most simulated tokens/s, ahead of every other finalist over the constants' spread"
    best = min([top, *tied], key=lambda mk: (-mk[1].margin_bytes, _simplicity(mk[1].candidate)))
    return best, (f"tied on tokens/s with {len(tied)} other finalist(s) within the paired band; chosen for the larger "
                  "device margin, then the simpler plan")


def _priced(c: Candidate, b: budget_lib.Budget, cfg, target: Target, mesh, seq: int) -> Candidate:
    """``c`` with the budget's memory, FLOPs, tokens per GPU and analytic step time at its batch, state and
    flags: everything that follows from the batch, so a finalist stepped down to a smaller batch is re-priced
    whole (it had kept the larger batch's tokens and ranked 1.5x high)."""
    return dataclasses.replace(c, device_bytes=b.device_bytes, host_bytes=b.host_bytes, step_flops=b.step_flops,
                               recompute_flops=b.recompute_flops, tokens=c.batch * seq / target.num_devices,
                               estimated_seconds=estimate_seconds(b, cfg, target, mesh, seq))


def _shrunk(cfg, target, seq, mesh, c: Candidate, flag_set, miss: float, room: int) -> Candidate | None:
    """``c`` at the largest batch (its own at most) whose budget, scaled by ``miss``, fits ``room``; None where even
    one batch step does not."""
    if c.device_bytes * miss <= room:
        return c
    step = sharding.batch_ways(mesh) * c.state.gradient_accumulation_steps
    budgets = {c.batch: c.device_bytes}

    def budget_bytes(batch):
        if batch not in budgets:
            budgets[batch] = budget_lib.estimate(cfg, batch, seq, c.policy, mesh, target=target, state=c.state,
                                                 flags=flag_set).device_bytes
        return budgets[batch]

    batch = _next_batch([(c.batch, int(c.device_bytes * miss), False)], room, budget_bytes, step, c.batch)
    if batch is None or budget_bytes(batch) * miss > room:
        return None
    b = budget_lib.estimate(cfg, batch, seq, c.policy, mesh, target=target, state=c.state, flags=flag_set)
    return _priced(dataclasses.replace(c, batch=batch), b, cfg, target, mesh, seq)


LOOSE = 0.98  # a finalist compiled under this share of its budget: the budget is loose there, so one more compile up
ATTEMPTS = 4  # compiles per finalist at most


def _next_batch(tried: list[tuple[int, int, bool]], room: int, budget_bytes, step: int, ceiling: int) -> int | None:
    """The batch to compile next, given the (batch, compiled device bytes, fits) ``tried`` so far, or None to stop.

    It lies strictly between the largest batch that fitted and the smallest that did not (the
    search's ``ceiling`` above it), in multiples of ``step``: where the compiled bytes of two batches are known, on
    the line through them (the two nearest the boundary); where one is, at the largest batch whose budget, scaled by
    that compile's miss, fits (``budget_bytes(batch)``)."""
    low = max((b for b, _, fits in tried if fits), default=0) + step
    high = min((b for b, _, fits in tried if not fits), default=ceiling + step) - step
    if low > high:
        return None
    near = [(b, n) for b, n, _ in sorted(tried, key=lambda t: abs(t[1] - room))[:2]]
    (b0, n0), (b1, n1) = near if len(near) == 2 else (near[0], near[0])
    if b0 != b1 and (n1 - n0) / (b1 - b0) > 0:  # the compiled bytes' line through two batches
        guess = b0 + (room - n0) * (b1 - b0) / (n1 - n0)
        return min(high, max(low, int(guess // step) * step))
    miss = n0 / budget_bytes(b0)
    lo, hi = low // step, high // step  # in steps: bisect for the largest whose budget x miss fits
    if budget_bytes(lo * step) * miss > room:
        return lo * step
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if budget_bytes(mid * step) * miss <= room else (lo, mid - 1)
    return lo * step


def _check(cfg, target, seq, mesh, c: Candidate, flag_set, margin: fit.Margin, host_limit: int,
           grow: bool = True) -> Checked:
    """Compile a finalist and simulate its schedule at the largest batch that compiles under the margin.

    A finalist over HBM (or refused by XLA:TPU) steps down; one that fits but compiled under ``LOOSE`` of its
    budget steps up (``grow``: the batch is not fixed), the search's ceiling at most; ``_next_batch`` chooses each
    batch, ``ATTEMPTS`` compiles at most. The largest that fitted is kept; none: the last refused."""
    placement = compiler.place(target, sharding.active_axes(mesh))
    trainer = train.trainer(cfg, c.policy, state=c.state)
    step = sharding.batch_ways(mesh) * c.state.gradient_accumulation_steps
    room = target.usable_hbm_bytes - margin.of(target.usable_hbm_bytes)
    ceiling = MAX_PER_SHARD * step if grow else c.batch
    budgets = {c.batch: c.device_bytes}

    def budget_bytes(batch):
        if batch not in budgets:
            budgets[batch] = budget_lib.estimate(cfg, batch, seq, c.policy, mesh, target=target, state=c.state,
                                                 flags=flag_set).device_bytes
        return budgets[batch]

    tried, kept, last = [], None, None
    for _ in range(ATTEMPTS):
        try:
            report = train.compile_step(trainer, placement, c.batch, seq, flags=flag_set)
        except compiler.DoesNotFit as refused:  # XLA:TPU refuses a program over HBM at compile time: a verdict
            last, needed = (c, refused, None), refused.needed_bytes
        else:
            verdict = fit.check(report.device.peak_bytes, report.host.total_bytes, target, margin, host_limit)
            last, needed = (c, report, verdict), report.device.peak_bytes
            if verdict.fits:
                kept = last
        tried.append((c.batch, needed, kept is last))
        if kept is last and (not grow or needed >= LOOSE * c.device_bytes):
            break  # fits, and the budget was not loose here (or the batch is fixed)
        batch = _next_batch(tried, room, budget_bytes, step, ceiling)
        if batch is None:
            break
        c = _priced(dataclasses.replace(c, batch=batch),
                    budget_lib.estimate(cfg, batch, seq, c.policy, mesh, target=target, state=c.state, flags=flag_set),
                    cfg, target, mesh, seq)
    c, report, verdict = kept or last
    refused = min((b for b, _, fits in tried if not fits and b > c.batch), default=None)
    if verdict is None:  # refused at every batch tried: not simulated, never chosen
        return dataclasses.replace(_refused(c, report), refused_batch=refused)
    return dataclasses.replace(_simulated(c, report, verdict, target), refused_batch=refused)


def _refused(c: Candidate, err: compiler.DoesNotFit) -> Checked:
    """A finalist XLA:TPU refused to compile (over HBM): not simulated, never chosen."""
    return Checked(c, err.needed_bytes, 0, False, float("inf"), 0.0, 0.0, 0.0, err.compile_seconds, 0,
                   err.available_bytes - err.needed_bytes)


def _simulated(c: Candidate, report, verdict, target: Target) -> Checked:
    """A compiled finalist, simulated from its schedule."""
    sim = schedule.simulate(report, target)
    checks = report.offload.checks
    return Checked(c, report.device.peak_bytes, report.host.total_bytes, verdict.fits, sim.step_seconds,
                   sim.tflops_per_gpu, sim.exposed_transfer_seconds, sim.exposed_collective_seconds,
                   report.compile_seconds, len(checks.wrong) if checks is not None else 0,
                   verdict.usable_hbm_bytes - verdict.device_bytes, report)


def _further(cfg, target: Target, seq: int, mesh, k: Checked, flag_set, margin: fit.Margin,
             host_limit: int, progress=None) -> list[Checked]:
    """The pick's batch proven the largest: its program compiled one batch step further, and again while that fits
    (``ATTEMPTS - 1`` compiles at most, the search's ceiling at most); every compile, in order, the last one over the
    margin where one was. A step its own ``_check`` already found over the margin is not compiled again.

    The budget's error is not one number: on the chip's first decision set it was 10-24 % under the compile for
    saved tensors and 7 % over it for full remat with the moments on the host, and at S 32K its growth per batch
    step was twice the compiler's. Where it says a step more does not fit, only the compiler knows."""
    c = k.candidate
    step = sharding.batch_ways(mesh) * c.state.gradient_accumulation_steps
    placement = compiler.place(target, sharding.active_axes(mesh))
    trainer = train.trainer(cfg, c.policy, state=c.state)
    out: list[Checked] = []
    for _ in range(ATTEMPTS - 1):
        batch = c.batch + step
        if batch > MAX_PER_SHARD * step or batch == k.refused_batch:
            break
        c = _priced(dataclasses.replace(c, batch=batch), budget_lib.estimate(
            cfg, batch, seq, c.policy, mesh, target=target, state=c.state, flags=flag_set), cfg, target, mesh, seq)
        if progress:
            progress(f"compiling {c.label()}: the pick one batch step further")
        try:
            report = train.compile_step(trainer, placement, batch, seq, flags=flag_set)
        except compiler.DoesNotFit as refused:
            out.append(_refused(c, refused))
            break
        verdict = fit.check(report.device.peak_bytes, report.host.total_bytes, target, margin, host_limit)
        out.append(_simulated(c, report, verdict, target))
        if not verdict.fits:
            break
    return out


def _explain(cfg, c: Candidate, mesh, seq: int, order, info, never, target: Target) -> list[TensorChoice]:
    """Why each tensor sits where the plan puts it: recompute spared per byte against HBM and link time
    (per layer, one microbatch of the plan)."""
    where, link = c.policy, target.link
    n_acc = c.state.gradient_accumulation_steps
    per_shard = c.batch // (sharding.batch_ways(mesh) * n_acc)  # info is at one sequence per batch shard
    forward_s = c.step_flops / 3 / target.gpu.bf16_dense_flops / (n_acc * cfg.num_layers)
    # the #46231 workaround's transfers are kernels (XLA:GPU's; a TPU's copies are its DMA engines')
    engine = "kernel" if workaround.in_effect() and not target.is_tpu else "copy_engine"

    def moved(nbytes: float) -> tuple[float, str]:
        """One layer's write (seconds) and its time out and back, in words, at the transfers' engine's rate."""
        out_s, back_s = (link.transfer_seconds(nbytes, d, engine=engine) for d in ("d2h", "h2d"))
        by = " as the #46231 workaround's kernels" if engine == "kernel" else ""
        return out_s, f"{out_s * 1e3:.2f} ms out and {back_s * 1e3:.2f} ms back{by}"

    out = []
    for rank, name in enumerate(order):
        sizes, spared = info[name]
        nbytes, spared = sizes.bytes_per_layer * per_shard, spared * per_shard
        link_s, link_words = moved(nbytes)
        location, ratio = where.get(name, "remat"), spared / nbytes
        if location == "device":
            reason = f"#{rank + 1} in recompute spared per byte ({ratio:,.0f} FLOP/B): kept in HBM"
        elif location == "offload":
            reason = (f"#{rank + 1} ({ratio:,.0f} FLOP/B), past what HBM holds: to the host, one layer's copy "
                      f"{link_words}, against {forward_s * 1e3:.2f} ms of a layer's forward compute")
        else:
            reason = (f"#{rank + 1} ({ratio:,.0f} FLOP/B): recomputed, {spared / 1e9:,.0f} GFLOP per layer; "
                      "keeping or moving it cost more than it spared")
        out.append(TensorChoice(name, nbytes, sizes.layers, spared, link_s, forward_s, location, reason))
    carry = per_shard * seq * cfg.d_model * cfg.act_bytes  # [b, S, D] in the compute dtype, each layer's input
    link_s, link_words = moved(carry)
    if where.get(CARRY) == "offload":
        reason = (f"the scan carry (never recomputed: every layer's backward starts from it): offloaded, "
                  f"{carry / GiB:.2f} GiB per layer off HBM for {link_words}")
    else:
        reason = "the scan carry (never recomputed: every layer's backward starts from it): kept in HBM"
    out.append(TensorChoice(CARRY, carry, cfg.num_layers, 0.0, link_s, forward_s, where.get(CARRY, "device"), reason))
    return out + [dataclasses.replace(t, bytes_per_layer=t.bytes_per_layer * per_shard) for t in never]
