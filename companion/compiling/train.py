"""A real training step: next-token loss, AdamW with warmup-cosine and clipping, mixed precision.

The same step runs concretely (tiny configs on the CPU, in seconds) and abstractly (405B on a
64-GPU target: ``abstract_state`` gives sharded ``ShapeDtypeStruct``s, nothing is allocated).

Mixed precision, MaxText's way: parameters, gradients and Adam moments in ``weight_dtype``
(float32 master weights); matmuls and activations in ``dtype`` (bfloat16); logits and the loss
in float32.

MaxText's training-state levers (``state.StateConfig``): ``gradient_accumulation_steps`` (the batch
split into microbatches, their gradients summed in an fp32 accumulator, one optimizer update),
``optimizer_memory_host_offload`` (AdamW's moments live in pinned host memory and come to the
device for the update) and ``parameter_memory_host_offload`` (the fp32 parameters live in pinned
host memory; each scanned layer's weights come to the device when the layer runs, all of them
for the update), as MaxText's ``train.py`` and ``decoders.py`` do.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from . import compiler
from ..models import flops
from .. import models
from ..ground import policies
from ..ground.state import StateConfig
from ..models import layers as layers_lib
from ..models.configs import ModelConfig
from ..ground.sharding import AxisRules, constrain


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """AdamW on a linear-warmup, cosine-decay schedule, with global-norm clipping.

    MaxText's defaults (``configs/base.yml``): ``learning_rate`` 3e-5, ``warmup_steps_fraction``
    0.1, b1 0.9, b2 0.95, eps 1e-8, weight decay 0.1, clipping at 1.0, decay to 10 % of the peak.
    ``total_steps`` is the lab's (MaxText's ``steps`` is 150,001).
    """

    learning_rate: float = 3e-5
    warmup_fraction: float = 0.1
    total_steps: int = 10_000
    final_fraction: float = 0.1  # the schedule ends at learning_rate x final_fraction
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    clip_norm: float = 1.0
    mu_dtype: str | None = None  # None: the parameters' dtype

    def __post_init__(self):
        if self.learning_rate <= 0 or self.total_steps < 1 or not 0 <= self.warmup_fraction < 1:
            raise ValueError(f"bad optimizer schedule: learning_rate {self.learning_rate}, warmup_fraction "
                             f"{self.warmup_fraction} (in [0, 1)), total_steps {self.total_steps}")

    @property
    def warmup_steps(self) -> int:
        return int(self.warmup_fraction * self.total_steps)

    def schedule(self) -> optax.Schedule:
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0, peak_value=self.learning_rate, warmup_steps=self.warmup_steps,
            decay_steps=self.total_steps, end_value=self.learning_rate * self.final_fraction)

    def transforms(self) -> tuple[optax.GradientTransformation, ...]:
        """Global-norm clipping, then AdamW: the optimizer, one transform at a time."""
        return (optax.clip_by_global_norm(self.clip_norm),
                optax.adamw(self.schedule(), b1=self.b1, b2=self.b2, eps=self.eps,
                            weight_decay=self.weight_decay, mu_dtype=self.mu_dtype))

    def optimizer(self) -> optax.GradientTransformation:
        return optax.chain(*self.transforms())


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy, in float32."""
    logits = logits.astype(jnp.float32)
    log_z = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(log_z - picked)


def _to(space, tree):
    """``jax.device_put`` every leaf to a memory space (``jax.memory.Space.Device`` or ``.Host``)."""
    return jax.tree.map(lambda x: jax.device_put(x, space), tree)


@dataclasses.dataclass(frozen=True)
class Trainer:
    """A model's structure plus everything static about its step (optimizer, remat policy, state)."""

    cfg: ModelConfig
    graphdef: Any
    optimizer: optax.GradientTransformation
    policy: policies.Policy
    state: StateConfig = StateConfig()

    def loss(self, params, rest, batch) -> jax.Array:
        model = nnx.merge(self.graphdef, params, rest)
        logits = model(batch["inputs"], self.policy.jax_policy(),
                       params_on_host=self.state.parameter_memory_host_offload, prevent_cse=self.prevent_cse)
        return cross_entropy(logits, batch["targets"])

    @property
    def prevent_cse(self) -> bool:
        """MaxText's ``should_prevent_cse_in_remat`` (``utils/maxtext_utils.py`` at e591f30): CSE barriers in
        the remat of unscanned layers, except under gradient accumulation on a GPU."""
        return not self.cfg.scan_layers and self.state.gradient_accumulation_steps == 1

    def loss_and_grads(self, params, rest, batch):
        """Loss and gradients of the whole batch: with gradient accumulation, a scan over
        microbatches summing fp32 gradients (the accumulator MaxText keeps), then their mean."""
        n = self.state.gradient_accumulation_steps
        if n == 1:
            return jax.value_and_grad(self.loss)(params, rest, batch)
        batch_size = batch["inputs"].shape[0]
        if batch_size % n:
            raise ValueError(f"batch {batch_size} does not split into {n} gradient accumulation steps")

        def micro(x):  # microbatch i takes rows i, i + n, ...: each stays spread over the batch's devices
            x = x.reshape(batch_size // n, n, *x.shape[1:]).swapaxes(0, 1)
            return constrain(x, (None, "activation_batch", "activation_length"))

        def body(carry, microbatch):
            loss_sum, acc = carry
            loss, grads = jax.value_and_grad(self.loss)(params, rest, microbatch)
            acc = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), acc, grads)
            return (loss_sum + loss, acc), None

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        (loss_sum, acc), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros), jax.tree.map(micro, batch))
        grads = jax.tree.map(lambda a, p: (a / n).astype(p.dtype), acc, params)
        return loss_sum / n, grads

    def step(self, params, rest, opt_state, batch):
        """One step: ``(params, opt_state, metrics)`` from ``(params, rest, opt_state, batch)``."""
        loss, grads = self.loss_and_grads(params, rest, batch)
        if self.state.optimizer_memory_host_offload:  # the moments come to the device for the update
            opt_state = _to(jax.memory.Space.Device, opt_state)
        if self.state.parameter_memory_host_offload:  # all parameters, for the update (and the gradients,
            params = _to(jax.memory.Space.Device, params)  # which autodiff returns where the parameters live)
            grads = _to(jax.memory.Space.Device, grads)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        if self.state.optimizer_memory_host_offload:
            opt_state = _to(jax.memory.Space.Host, opt_state)
        if self.state.parameter_memory_host_offload:
            params = _to(jax.memory.Space.Host, params)
        return params, opt_state, {"loss": loss, "grad_norm": optax.tree.norm(grads)}

    def grads(self, params, rest, batch):
        return self.loss_and_grads(params, rest, batch)[1]

    def jit_step(self) -> Callable:
        return jax.jit(self.step, donate_argnums=(0, 2))


def trainer(cfg: ModelConfig | str, policy="full", optimizer: OptimizerConfig = OptimizerConfig(),
            rules: AxisRules = AxisRules(), model: nnx.Module | None = None,
            state: StateConfig = StateConfig()) -> Trainer:
    """The trainer for a config; ``model`` (concrete or abstract) provides the graph structure."""
    cfg = models.config(cfg)
    model = model if model is not None else models.abstract(cfg, rules)
    graphdef, _, _ = nnx.split(model, nnx.Param, ...)
    resolved = policies.resolve(policy, emitted=model.checkpoint_names())
    return Trainer(cfg, graphdef, optimizer.optimizer(), resolved, state)


def init(cfg: ModelConfig | str, policy="full", optimizer: OptimizerConfig = OptimizerConfig(), seed: int = 0,
         state: StateConfig = StateConfig()):
    """Concrete ``(trainer, params, rest, opt_state)`` for configs that fit this machine."""
    model = models.build(cfg, seed)
    t = trainer(model.cfg, policy, optimizer, model=model, state=state)
    _, params, rest = nnx.split(model, nnx.Param, ...)
    opt_state = t.optimizer.init(params)
    # offloaded state starts where the step expects it (a buffer in the wrong memory kind is an XLA abort)
    if state.optimizer_memory_host_offload:
        opt_state = _to(jax.memory.Space.Host, opt_state)
    if state.parameter_memory_host_offload:
        params = _to(jax.memory.Space.Host, params)
    return t, params, rest, opt_state


def synthetic_batch(cfg: ModelConfig, batch: int, seq: int, seed: int = 0) -> dict[str, jax.Array]:
    """A learnable token stream: each sequence counts up from a random start (mod vocab)."""
    start = jax.random.randint(jax.random.key(seed), (batch, 1), 0, cfg.vocab_size)
    tokens = (start + jnp.arange(seq + 1)[None, :]) % cfg.vocab_size
    return {"inputs": tokens[:, :-1].astype(jnp.int32), "targets": tokens[:, 1:].astype(jnp.int32)}


# ----------------------------------------------------------------------------- abstract, sharded


def spec_tree(state, mesh_shape, rules: AxisRules, what: str):
    """PartitionSpecs for a State of Variables, from each Variable's logical axes."""
    def spec(path, variable):
        name = "/".join(str(getattr(p, "key", p)) for p in path)
        return rules.spec(variable.get_metadata()["logical_axes"], mesh_shape, variable.shape,
                          what=f"{what} {name}")
    return jax.tree_util.tree_map_with_path(spec, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


@dataclasses.dataclass(frozen=True)
class AbstractState:
    """Sharded placeholders for one training step on a placement."""

    params: Any
    rest: Any
    opt_state: Any
    batch: dict

    def arguments(self) -> tuple:
        return self.params, self.rest, self.opt_state, self.batch

    def host_arguments(self, state: StateConfig) -> list[bool] | None:
        """Per argument leaf: lives in pinned host memory (offloaded parameters or optimizer state)."""
        if not (state.optimizer_memory_host_offload or state.parameter_memory_host_offload):
            return None
        return ([state.parameter_memory_host_offload] * len(jax.tree.leaves(self.params))
                + [False] * len(jax.tree.leaves(self.rest))
                + [state.optimizer_memory_host_offload] * len(jax.tree.leaves(self.opt_state))
                + [False] * len(jax.tree.leaves(self.batch)))


def abstract_state(t: Trainer, placement: compiler.Placement, batch: int, seq: int,
                   rules: AxisRules = AxisRules()) -> AbstractState:
    """Parameters, optimizer state and a batch as ``ShapeDtypeStruct``s sharded over the mesh.

    Raises ValueError (naming the axis and sizes) when a shape does not divide the mesh.
    """
    model = models.abstract(t.cfg, rules)
    _, params, rest = nnx.split(model, nnx.Param, ...)
    mesh, mesh_shape = placement.mesh, dict(placement.mesh.shape)
    param_specs = spec_tree(params, mesh_shape, rules, "parameter")
    rest_specs = spec_tree(rest, mesh_shape, rules, "variable")

    host = "pinned_host"
    params_kind = host if t.state.parameter_memory_host_offload else None
    opt_kind = host if t.state.optimizer_memory_host_offload else None

    def place(tree, specs, kind=None):  # each Variable's value becomes a sharded ShapeDtypeStruct
        return jax.tree.map(lambda s, v: v.replace(jax.ShapeDtypeStruct(
            v.shape, v.dtype, sharding=NamedSharding(mesh, s, memory_kind=kind))), specs, tree)

    abstract_params = place(params, param_specs, params_kind)
    abstract_rest = place(rest, rest_specs)
    opt_shapes = jax.eval_shape(t.optimizer.init, place(params, param_specs))
    opt_state = optax.tree_map_params(
        t.optimizer, lambda leaf, spec: jax.ShapeDtypeStruct(
            leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec, memory_kind=opt_kind)),
        opt_shapes, jax.tree.map(lambda s, v: v.replace(s), param_specs, params),
        # the step moves the whole optimizer state, its step counts too, to the host and back (``Trainer.step``)
        transform_non_params=lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(
            mesh, PartitionSpec(), memory_kind=opt_kind)))
    token_spec = rules.spec(("activation_batch", "activation_length"), mesh_shape, (batch, seq), what="batch")
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=NamedSharding(mesh, token_spec))
    return AbstractState(abstract_params, abstract_rest, opt_state, {"inputs": tokens, "targets": tokens})


def time_call(fn: Callable, *args, repeats: int = 5, warmup: int = 1) -> float:
    """Median wall-clock seconds of ``fn(*args)`` after ``warmup`` calls (compile included there),
    waiting for the result each time (``jax.block_until_ready``)."""
    import statistics
    import time

    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def layer_stack_loss(cfg: ModelConfig, policy, rules: AxisRules = AxisRules(), prevent_cse: bool = False):
    """``(loss(layer_params, x), abstract model)`` for the scanned decoder stack alone: no embedding,
    no head. The loss is the mean square of the stack's output, enough to run its backward pass.
    ``prevent_cse``: see ``models.layers.apply_layers`` (off for a scanned stack, as in MaxText)."""
    model = models.abstract(cfg, rules)
    stacks = [name for name, _, _ in cfg.stacks()]
    graphdefs = {s: nnx.split(getattr(model, s))[0] for s in stacks}
    jax_policy = policies.resolve(policy, emitted=model.checkpoint_names()).jax_policy()

    def loss(stack_params: dict, x: jax.Array) -> jax.Array:
        positions = jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape[:2])
        for s in stacks:
            layers = nnx.merge(graphdefs[s], stack_params[s])
            x = layers_lib.apply_layers(layers, x, positions, jax_policy, prevent_cse=prevent_cse)
        return jnp.mean(jnp.square(x.astype(jnp.float32)))

    return loss, model, stacks


def compile_layer_stack(cfg: ModelConfig | str, policy, placement: compiler.Placement, batch: int, seq: int, *,
                        flags=None, workarounds: bool = True, dump: bool = False,
                        rules: AxisRules = AxisRules(), prevent_cse: bool = False) -> compiler.CompileReport:
    """Compile forward + backward of the decoder layers alone (gradients of weights and input);
    ``prevent_cse=True`` puts ``jax.checkpoint``'s optimization barriers in (MaxText leaves them out)."""
    cfg = models.config(cfg)
    loss, model, stacks = layer_stack_loss(cfg, policy, rules, prevent_cse)
    mesh_shape = dict(placement.mesh.shape)
    params = {}
    for s in stacks:
        state = nnx.state(getattr(model, s))
        specs = spec_tree(state, mesh_shape, rules, "parameter")
        params[s] = jax.tree.map(lambda spec, v: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=placement.sharding(spec)),
                                 specs, state)
    x_spec = rules.spec(("activation_batch", "activation_length", "activation_embed"), mesh_shape,
                        (batch, seq, cfg.d_model), what="layer input")
    x = placement.abstract((batch, seq, cfg.d_model), cfg.dtype, x_spec)
    count = flops.layer_stack_flops(cfg, batch / placement.num_devices, seq)
    workload = compiler.Workload(count.total, batch * seq / placement.num_devices,
                                 f"{cfg.name} layers, B={batch}, S={seq}")
    return compiler.compile(jax.grad(loss, argnums=(0, 1)), params, x, placement=placement, flags=flags,
                            workarounds=workarounds, dump=dump, workload=workload)


def compile_step(t: Trainer, placement: compiler.Placement, batch: int, seq: int, *,
                 flags=None, workarounds: bool = True, dump: bool = False,
                 rules: AxisRules = AxisRules()) -> compiler.CompileReport:
    """Compile the full train step (forward, backward, optimizer update) for ``placement``
    (flags: see ``compiler.compile``; by default MaxText's GPU flags and the lab's workarounds)."""
    state = abstract_state(t, placement, batch, seq, rules)
    return compiler.compile(t.jit_step(), *state.arguments(), placement=placement, flags=flags,
                            workarounds=workarounds, dump=dump, host_arguments=state.host_arguments(t.state),
                            workload=workload(t.cfg, placement.num_devices, batch, seq))


def workload(cfg: ModelConfig, num_devices: int, batch: int, seq: int) -> compiler.Workload:
    """A full step's model FLOPs and tokens per device (MaxText's count at ``batch / num_devices``
    sequences per device)."""
    return compiler.Workload(flops.model_flops(cfg, batch / num_devices, seq).total, batch * seq / num_devices,
                             f"{cfg.name}, B={batch}, S={seq}")
