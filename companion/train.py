"""A real training step: next-token loss, AdamW with warmup-cosine and clipping, mixed precision.

The same step runs concretely (tiny configs on the CPU, in seconds) and abstractly (405B on a
64-GPU target: ``abstract_state`` gives sharded ``ShapeDtypeStruct``s, nothing is allocated).

Mixed precision, MaxText's way: parameters, gradients and Adam moments in ``weight_dtype``
(float32 master weights); matmuls and activations in ``dtype`` (bfloat16); logits and the loss
in float32.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from . import compiler, models, policies
from .models import layers as layers_lib
from .models.configs import ModelConfig
from .sharding import AxisRules


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """AdamW (MaxText defaults) on a linear-warmup, cosine-decay schedule, with global-norm clipping."""

    learning_rate: float = 3e-4
    warmup_steps: int = 100
    total_steps: int = 10_000
    final_fraction: float = 0.1  # the schedule ends at learning_rate x final_fraction
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    clip_norm: float = 1.0
    mu_dtype: str | None = None  # None: the parameters' dtype

    def __post_init__(self):
        if self.learning_rate <= 0 or self.total_steps < 1 or not 0 <= self.warmup_steps < self.total_steps:
            raise ValueError(f"bad optimizer schedule: learning_rate {self.learning_rate}, warmup_steps "
                             f"{self.warmup_steps}, total_steps {self.total_steps}")

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


@dataclasses.dataclass(frozen=True)
class Trainer:
    """A model's structure plus everything static about its step (optimizer, remat policy)."""

    cfg: ModelConfig
    graphdef: Any
    optimizer: optax.GradientTransformation
    policy: policies.Policy

    def loss(self, params, rest, batch) -> jax.Array:
        model = nnx.merge(self.graphdef, params, rest)
        logits = model(batch["inputs"], self.policy.jax_policy())
        return cross_entropy(logits, batch["targets"])

    def step(self, params, rest, opt_state, batch):
        """One step: ``(params, opt_state, metrics)`` from ``(params, rest, opt_state, batch)``."""
        loss, grads = jax.value_and_grad(self.loss)(params, rest, batch)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, {"loss": loss, "grad_norm": optax.tree.norm(grads)}

    def grads(self, params, rest, batch):
        return jax.grad(self.loss)(params, rest, batch)

    def jit_step(self) -> Callable:
        return jax.jit(self.step, donate_argnums=(0, 2))


def trainer(cfg: ModelConfig | str, policy="full", optimizer: OptimizerConfig = OptimizerConfig(),
            rules: AxisRules = AxisRules(), model: nnx.Module | None = None) -> Trainer:
    """The trainer for a config; ``model`` (concrete or abstract) provides the graph structure."""
    cfg = models.config(cfg)
    model = model if model is not None else models.abstract(cfg, rules)
    graphdef, _, _ = nnx.split(model, nnx.Param, ...)
    resolved = policies.resolve(policy, emitted=model.checkpoint_names())
    return Trainer(cfg, graphdef, optimizer.optimizer(), resolved)


def init(cfg: ModelConfig | str, policy="full", optimizer: OptimizerConfig = OptimizerConfig(), seed: int = 0):
    """Concrete ``(trainer, params, rest, opt_state)`` for configs that fit this machine."""
    model = models.build(cfg, seed)
    t = trainer(model.cfg, policy, optimizer, model=model)
    _, params, rest = nnx.split(model, nnx.Param, ...)
    return t, params, rest, t.optimizer.init(params)


def synthetic_batch(cfg: ModelConfig, batch: int, seq: int, seed: int = 0) -> dict[str, jax.Array]:
    """A learnable token stream: each sequence counts up from a random start (mod vocab)."""
    start = jax.random.randint(jax.random.key(seed), (batch, 1), 0, cfg.vocab_size)
    tokens = (start + jnp.arange(seq + 1)[None, :]) % cfg.vocab_size
    return {"inputs": tokens[:, :-1].astype(jnp.int32), "targets": tokens[:, 1:].astype(jnp.int32)}


# ----------------------------------------------------------------------------- abstract, sharded


def _spec_tree(state, mesh_shape, rules: AxisRules, what: str):
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


def abstract_state(t: Trainer, placement: compiler.Placement, batch: int, seq: int,
                   rules: AxisRules = AxisRules()) -> AbstractState:
    """Parameters, optimizer state and a batch as ``ShapeDtypeStruct``s sharded over the mesh.

    Raises ValueError (naming the axis and sizes) when a shape does not divide the mesh.
    """
    model = models.abstract(t.cfg, rules)
    _, params, rest = nnx.split(model, nnx.Param, ...)
    mesh, mesh_shape = placement.mesh, dict(placement.mesh.shape)
    param_specs = _spec_tree(params, mesh_shape, rules, "parameter")
    rest_specs = _spec_tree(rest, mesh_shape, rules, "variable")

    def place(tree, specs):  # each Variable's value becomes a sharded ShapeDtypeStruct
        return jax.tree.map(lambda s, v: v.replace(jax.ShapeDtypeStruct(v.shape, v.dtype,
                                                                        sharding=NamedSharding(mesh, s))),
                            specs, tree)

    abstract_params = place(params, param_specs)
    abstract_rest = place(rest, rest_specs)
    opt_shapes = jax.eval_shape(t.optimizer.init, abstract_params)
    replicated = NamedSharding(mesh, PartitionSpec())
    opt_state = optax.tree_map_params(
        t.optimizer, lambda leaf, spec: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec)),
        opt_shapes, jax.tree.map(lambda s, v: v.replace(s), param_specs, params),
        transform_non_params=lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=replicated))
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


def layer_stack_loss(cfg: ModelConfig, policy, rules: AxisRules = AxisRules()):
    """``(loss(layer_params, x), abstract model)`` for the scanned decoder stack alone: no embedding,
    no head. The loss is the mean square of the stack's output, enough to run its backward pass."""
    model = models.abstract(cfg, rules)
    stacks = [s for s in ("layers", "dense_layers", "moe_layers") if getattr(model, s, None) is not None]
    graphdefs = {s: nnx.split(getattr(model, s))[0] for s in stacks}
    jax_policy = policies.resolve(policy, emitted=model.checkpoint_names()).jax_policy()

    def loss(stack_params: dict, x: jax.Array) -> jax.Array:
        positions = jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape[:2])
        for s in stacks:
            layers = nnx.merge(graphdefs[s], stack_params[s])
            x = layers_lib.scan_layers(layers, x, positions, jax_policy)
        return jnp.mean(jnp.square(x.astype(jnp.float32)))

    return loss, model, stacks


def compile_layer_stack(cfg: ModelConfig | str, policy, placement: compiler.Placement, batch: int, seq: int, *,
                        flags=None, rules: AxisRules = AxisRules()) -> compiler.CompileReport:
    """Compile forward + backward of the decoder layers alone (gradients of weights and input)."""
    cfg = models.config(cfg)
    loss, model, stacks = layer_stack_loss(cfg, policy, rules)
    mesh_shape = dict(placement.mesh.shape)
    params = {}
    for s in stacks:
        state = nnx.state(getattr(model, s))
        specs = _spec_tree(state, mesh_shape, rules, "parameter")
        params[s] = jax.tree.map(lambda spec, v: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=placement.sharding(spec)),
                                 specs, state)
    x_spec = rules.spec(("activation_batch", "activation_length", "activation_embed"), mesh_shape,
                        (batch, seq, cfg.d_model), what="layer input")
    x = placement.abstract((batch, seq, cfg.d_model), cfg.dtype, x_spec)
    return compiler.compile(jax.grad(loss, argnums=(0, 1)), params, x, placement=placement, flags=flags)


def compile_step(t: Trainer, placement: compiler.Placement, batch: int, seq: int, *,
                 flags=None, dump: bool = False, rules: AxisRules = AxisRules()) -> compiler.CompileReport:
    """Compile the full train step (forward, backward, optimizer update) for ``placement``."""
    state = abstract_state(t, placement, batch, seq, rules)
    return compiler.compile(t.jit_step(), *state.arguments(), placement=placement, flags=flags, dump=dump)
