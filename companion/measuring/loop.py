"""A training loop on real devices: sharded state, steps, and Orbax checkpoints to resume from.

``run(RunConfig(...))`` trains a (small) model for ``steps`` steps on every device JAX sees — one
process, or several after ``jax.distributed.initialize`` (``companion.distributed``) — with the
parameters and optimizer state sharded over an ``fsdp`` mesh axis and the batch over the same
axis, as MaxText shards them. Every ``save_every`` steps the whole train state is saved with
Orbax (``orbax-checkpoint``: ``CheckpointManager``, asynchronous saves); a run that finds a
checkpoint in ``checkpoint_dir`` restores the newest one into the same shardings and resumes
after it. The data are the deterministic synthetic batches of ``train.synthetic_batch`` (one per
step, seeded by the step), so a resumed run sees exactly the batches an uninterrupted one does.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .. import models
from ..compiling import train
from ..ground.sharding import AxisRules


@dataclasses.dataclass(frozen=True)
class RunConfig:
    model: str = "tiny-llama"
    steps: int = 10
    batch: int = 8
    seq: int = 64
    policy: str = "full"
    seed: int = 0
    checkpoint_dir: str | None = None
    save_every: int | None = None  # default: only at the end

    def __post_init__(self):
        for name in ("steps", "batch", "seq"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.save_every is not None and (not isinstance(self.save_every, int) or self.save_every < 1):
            raise ValueError(f"save_every must be a positive integer, got {self.save_every!r}")
        if self.save_every is not None and self.checkpoint_dir is None:
            raise ValueError("save_every needs a checkpoint_dir to save into")


@dataclasses.dataclass(frozen=True)
class RunResult:
    losses: dict[int, float]  # step -> loss, for the steps this run computed
    resumed_from: int | None  # the checkpoint step it restored, if any
    saved: tuple[int, ...]  # the steps it saved
    num_processes: int
    num_devices: int


def _global(array: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A global array from a value every process holds whole (same seed: same value)."""
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def _mesh() -> Mesh:
    """Every device of every process on one ``fsdp`` axis (axis type Auto, as ``compiler.place`` makes them)."""
    return Mesh(np.asarray(jax.devices(), dtype=object).reshape(-1), ("fsdp",))


def initial_state(t: train.Trainer, cfg: models.ModelConfig, mesh: Mesh, seed: int, rules: AxisRules = AxisRules()):
    """``(params, rest, opt_state)`` built on the host from ``seed`` and placed sharded over ``mesh``
    (parameters by their logical axes; the optimizer state like its parameters)."""
    model = models.build(cfg, seed, rules)
    _, params, rest = nnx.split(model, nnx.Param, ...)
    mesh_shape = dict(mesh.shape)
    specs = train.spec_tree(params, mesh_shape, rules, "parameter")
    rest_specs = train.spec_tree(rest, mesh_shape, rules, "variable")

    def place(tree, tree_specs):
        return jax.tree.map(lambda s, v: v.replace(_global(np.asarray(v.value), NamedSharding(mesh, s))),
                            tree_specs, tree)

    params, rest = place(params, specs), place(rest, rest_specs)
    with jax.set_mesh(mesh):
        opt_state = jax.jit(t.optimizer.init)(params)
    return params, rest, opt_state


def _batch(cfg, batch: int, seq: int, step: int, mesh: Mesh) -> dict:
    tokens = train.synthetic_batch(cfg, batch, seq, seed=step)
    sharding = NamedSharding(mesh, PartitionSpec("fsdp"))
    return {k: _global(np.asarray(v), sharding) for k, v in tokens.items()}


# Of the RAM this machine has available, what a run may plan to use (the rest: the interpreter, XLA's
# compile, the data): an assumption
RAM_SHARE = 0.8


def host_bytes_needed(config: RunConfig, num_devices: int) -> int:
    """Host RAM a run on this machine's (CPU) devices needs: every device's step as the budget counts it
    (parameters, gradients, optimizer state, activations at the peak; on a CPU all of it is host RAM),
    and the initial state built once on the host before it is placed."""
    from ..memory import budget

    cfg = models.config(config.model)
    state = 16 * cfg.param_count()  # fp32 parameters, gradients and two Adam moments
    try:
        b = budget.estimate(cfg, config.batch, config.seq, config.policy, {"fsdp": num_devices})
        step = num_devices * (b.device_bytes + b.host_bytes)
    except ValueError:  # a step the budget does not model: the state alone, a floor
        step = state
    return step + 4 * cfg.param_count()


def available_host_bytes() -> int:
    """RAM the kernel says a new allocation can get (``MemAvailable``), else the machine's total."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_host_memory(config: RunConfig, num_devices: int, available: int | None = None) -> None:
    """Refuse, in one line, a run this machine's RAM cannot hold (before anything is built: the kernel's
    OOM killer would end the process, in a notebook the kernel)."""
    need = host_bytes_needed(config, num_devices)
    have = available_host_bytes() if available is None else available
    if need > RAM_SHARE * have:
        gib = 2**30
        raise MemoryError(f"train --model {config.model} (B={config.batch}, S={config.seq}) needs about {need / gib:.0f} "
                          f"GiB of host RAM on {num_devices} CPU device(s); this machine has {have / gib:.0f} GiB "
                          f"available: train tiny-llama or tiny-deepseek here, and ask `python -m companion budget "
                          f"--model {config.model}` what it needs on GPUs")


def run(config: RunConfig) -> RunResult:
    """Train ``config.steps`` steps (resuming from the newest checkpoint in ``checkpoint_dir``); refuses a run
    this machine's RAM cannot hold (``check_host_memory``)."""
    import orbax.checkpoint as ocp

    check_host_memory(config, jax.device_count())
    cfg = models.config(config.model)
    t = train.trainer(cfg, config.policy)
    mesh = _mesh()
    if config.batch % jax.device_count():
        raise ValueError(f"batch {config.batch} does not divide over {jax.device_count()} devices")
    params, rest, opt_state = initial_state(t, cfg, mesh, config.seed)  # built on the host, outside the mesh
    with jax.set_mesh(mesh):
        state = (params, rest, opt_state)
        manager, start, resumed = None, 0, None
        if config.checkpoint_dir is not None:
            manager = ocp.CheckpointManager(Path(config.checkpoint_dir).absolute(),
                                            options=ocp.CheckpointManagerOptions(enable_async_checkpointing=True))
            latest = manager.latest_step()
            if latest is not None:
                leaves, treedef = jax.tree.flatten(state)
                target = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding) for x in leaves]
                restored = manager.restore(latest, args=ocp.args.StandardRestore(target))
                state = jax.tree.unflatten(treedef, list(restored))
                start, resumed = latest, latest
        step_fn = t.jit_step()
        losses, saved = {}, []
        params, rest, opt_state = state
        for step in range(start, config.steps):
            params, opt_state, metrics = step_fn(params, rest, opt_state, _batch(cfg, config.batch, config.seq, step, mesh))
            losses[step + 1] = float(metrics["loss"])
            done = step + 1
            if manager is not None and (done == config.steps or (config.save_every and done % config.save_every == 0)):
                manager.save(done, args=ocp.args.StandardSave(jax.tree.leaves((params, rest, opt_state))))
                saved.append(done)
        if manager is not None:
            manager.wait_until_finished()
            manager.close()
    return RunResult(losses, resumed, tuple(saved), jax.process_count(), jax.device_count())
