"""MaxText configs in and out: a user's MaxText config read into the lab's inputs, and the lab's
choices written back as MaxText overrides (a YAML fragment, a command line) with the environment
a GPU run needs.

Key names, values and defaults are MaxText's (``src/maxtext/configs/base.yml`` and
``configs/models/*.yml`` of AI-Hypercomputer/maxtext at e591f30, Aug 2026): ``remat_policy`` and the
per-tensor keys of its ``custom`` policy, ``per_device_batch_size`` (one microbatch: global batch = it x every
device x ``gradient_accumulation_steps``), ``max_target_length``, the ``ici_*`` / ``dcn_*`` mesh keys, ``attention``,
``sparse_matmul`` / ``megablox`` / ``capacity_factor`` (-1: dropless) / ``ragged_buffer_factor``,
``gradient_accumulation_steps``, ``optimizer_memory_host_offload``, ``parameter_memory_host_offload``.

One convention is the lab's, as MaxText's GPU recipes use it: ``ici_*`` axes span the GPUs of one
host (its NVLink), ``dcn_*`` axes the hosts; an axis's size is ici x dcn, and one ``-1`` per group
takes what the other axes leave. Keys the lab does not model are listed (``MaxTextRun.not_modelled``);
values it cannot honour are refused with a one-line error.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Mapping

from . import policies
from .models import configs as model_configs
from .train import StateConfig

# MaxText model_name -> the lab's config (the models both have)
MODEL_NAMES = {"llama3.1-8b": "llama3.1-8b", "llama3.1-70b": "llama3.1-70b", "llama3.1-405b": "llama3.1-405b",
               "deepseek3-671b": "deepseek-v3-671b"}
LAB_AXES = ("data", "fsdp", "tensor", "expert")  # MaxText's mesh axes the lab models
OTHER_AXES = ("diloco", "fsdp_transpose", "sequence", "context", "context_usp_ulysses", "context_autoregressive",
              "tensor_sequence", "autoregressive", "pipeline")  # in base.yml; the lab models them at 1 only
# MaxText attention -> the lab's: on a GPU MaxText's automatic choice and 'flash' run a fused flash
# kernel (cuDNN's via Transformer Engine for 'cudnn_flash_te'), which the lab's 'flash' is
ATTENTION = {"autoselected": "flash", "flash": "flash", "cudnn_flash_te": "flash", "dot_product": "dot_product"}
EXPORT_ATTENTION = {"flash": "cudnn_flash_te", "dot_product": "dot_product"}
REMAT_CHOICES = ("remat", "device", "offload")
# Values the lab's compiles assume; a config asking for others is refused
FIXED = {"scan_layers": True, "dtype": "bfloat16", "weight_dtype": "float32"}
READ_KEYS = frozenset({
    "model_name", "remat_policy", *policies.TENSOR_NAMES, "per_device_batch_size", "max_target_length",
    "gradient_accumulation_steps", "optimizer_memory_host_offload", "parameter_memory_host_offload", "attention",
    "sparse_matmul", "megablox", "capacity_factor", "ragged_buffer_factor", "hardware", *FIXED,
    *(f"{g}_{a}_parallelism" for g in ("ici", "dcn") for a in LAB_AXES + OTHER_AXES)})


@dataclasses.dataclass(frozen=True)
class MaxTextRun:
    """What a MaxText config decides that the lab models, in the lab's terms."""

    model: str  # the lab's config name
    policy: str | dict  # a preset name, or a custom spec {tensor: remat|device|offload}
    per_device_batch_size: float
    seq: int
    ici: dict[str, int]  # mesh axis -> size within a host (-1: the rest)
    dcn: dict[str, int]  # mesh axis -> size across hosts (-1: the rest)
    attention: str = "flash"
    moe: dict = dataclasses.field(default_factory=dict)  # ModelConfig.with_moe changes
    state: StateConfig = StateConfig()
    not_modelled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # how the lab read what the config leaves to the software stack

    def config(self):
        """The lab's model config, with the run's attention and MoE."""
        cfg = model_configs.config(self.model, attention=self.attention)
        return cfg.with_moe(**self.moe) if self.moe else cfg

    def mesh(self, num_devices: int, gpus_per_host: int) -> dict[str, int]:
        """The lab's mesh: each axis ici x dcn, the ``-1`` axes filled (ici per host, dcn over hosts)."""
        if num_devices % gpus_per_host and num_devices > gpus_per_host:
            raise ValueError(f"{num_devices} GPUs are not whole hosts of {gpus_per_host}")
        per_host = min(gpus_per_host, num_devices)
        ici = _fill(self.ici, per_host, "ici", f"the {per_host} GPUs of a host")
        dcn = _fill(self.dcn, num_devices // per_host, "dcn", f"{num_devices // per_host} hosts")
        return {a: ici[a] * dcn[a] for a in LAB_AXES}

    def global_batch(self, num_devices: int) -> int:
        """MaxText's global batch: per_device_batch_size (one microbatch) x every device x
        gradient_accumulation_steps (``global_batch_to_train`` in MaxText's configs/types.py)."""
        micro = self.per_device_batch_size * num_devices
        if micro != int(micro) or micro < 1:
            raise ValueError(f"per_device_batch_size {self.per_device_batch_size:g} x {num_devices} GPUs = {micro:g} "
                             "is not a whole number of sequences")
        return int(micro) * self.state.gradient_accumulation_steps


def _fill(axes: Mapping[str, int], total: int, group: str, what: str) -> dict[str, int]:
    """One group's axes with its ``-1`` filled (``sharding.parse_mesh``'s rules), errors naming the group."""
    from . import sharding

    try:
        return sharding.parse_mesh({a: int(axes.get(a, 1)) for a in LAB_AXES}, total)
    except ValueError as err:
        raise ValueError(f"{group}_*_parallelism over {what}: {err}") from None


def _load(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(source, Mapping):
        return dict(source)
    import yaml

    path = Path(source)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ValueError(f"cannot read MaxText config {str(path)!r}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"MaxText config {str(path)!r} is not YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"MaxText config {str(path)!r} is not a mapping of keys to values")
    return data


def read(source: str | Path | Mapping[str, Any], sparse_kernel: str = "ragged_dot") -> MaxTextRun:
    """A MaxText config (a YAML file of overrides, or the mapping) as the lab's inputs. MaxText's sparse
    MoE path is read as ``sparse_kernel``: ``ragged_dot`` (what its GPU code calls, as pip jaxlib 0.10.2
    runs it) or ``grouped`` (the grouped-GEMM kernel a tuned deployment runs for the same call); no
    MaxText key chooses between them, the jaxlib does."""
    if sparse_kernel not in ("ragged_dot", "grouped"):
        raise ValueError(f"sparse_kernel {sparse_kernel!r}: choose ragged_dot or grouped")
    raw = _load(source)
    name = raw.get("model_name")
    if name not in MODEL_NAMES:
        raise ValueError(f"model_name {name!r}: the lab has {', '.join(MODEL_NAMES)}")
    for key, value in FIXED.items():
        if key in raw and raw[key] != value:
            raise ValueError(f"{key}: {raw[key]!r} is not modelled (the lab compiles {key}: {value!r})")
    if raw.get("hardware", "gpu") not in ("gpu", "gpu_multiprocess"):
        raise ValueError(f"hardware: {raw['hardware']!r}: the lab models NVIDIA GPUs (gpu, gpu_multiprocess)")
    for group in ("ici", "dcn"):
        for axis in OTHER_AXES:
            if int(raw.get(f"{group}_{axis}_parallelism", 1)) != 1:
                raise ValueError(f"{group}_{axis}_parallelism: {raw[f'{group}_{axis}_parallelism']} is not modelled "
                                 f"(the lab's mesh axes: {', '.join(LAB_AXES)})")
    policy = raw.get("remat_policy", "full")
    if policy == "custom":
        policy = {k: raw[k] for k in policies.TENSOR_NAMES if k in raw}
        bad = {k: v for k, v in policy.items() if v not in REMAT_CHOICES}
        if bad:
            raise ValueError(f"custom remat values {bad}: choose one of {', '.join(REMAT_CHOICES)}")
    elif policy not in policies.PRESETS or policy == "no_remat":
        raise ValueError(f"remat_policy {policy!r}: MaxText's are custom, "
                         f"{', '.join(p for p in policies.PRESETS if p != 'no_remat')}")
    attention = raw.get("attention", "autoselected")
    if attention not in ATTENTION:
        raise ValueError(f"attention {attention!r}: the lab models {', '.join(ATTENTION)}")
    moe = {}
    cfg = model_configs.config(MODEL_NAMES[name])
    notes = []
    if cfg.moe is not None:
        moe = moe_path(raw)
        if moe["dispatch"] == "ragged_dot":
            moe["dispatch"] = sparse_kernel
            notes.append("MoE: MaxText's sparse path read as jax.lax.ragged_dot, as pip jaxlib 0.10.2 runs it (every "
                         "row times every local expert); --moe grouped shows it as a grouped-GEMM kernel"
                         if sparse_kernel == "ragged_dot" else
                         "MoE: MaxText's sparse path read as a grouped-GEMM kernel (a tuned deployment's; pip jaxlib "
                         "0.10.2 runs jax.lax.ragged_dot densely instead: --moe ragged_dot)")
    state = StateConfig(gradient_accumulation_steps=int(raw.get("gradient_accumulation_steps", 1)),
                        optimizer_memory_host_offload=bool(raw.get("optimizer_memory_host_offload", False)),
                        parameter_memory_host_offload=bool(raw.get("parameter_memory_host_offload", False)))
    mesh = {g: {a: int(raw[f"{g}_{a}_parallelism"]) for a in LAB_AXES if f"{g}_{a}_parallelism" in raw}
            for g in ("ici", "dcn")}
    # base.yml's own defaults where the file leaves them: ici_fsdp -1, dcn_data -1
    mesh["ici"].setdefault("fsdp", -1 if -1 not in mesh["ici"].values() else 1)
    mesh["dcn"].setdefault("data", -1 if -1 not in mesh["dcn"].values() else 1)
    return MaxTextRun(
        model=MODEL_NAMES[name], policy=policy, per_device_batch_size=float(raw.get("per_device_batch_size", 12.0)),
        seq=int(raw.get("max_target_length", 2048)), ici=mesh["ici"], dcn=mesh["dcn"], attention=ATTENTION[attention],
        moe=moe, state=state, not_modelled=tuple(sorted(k for k in raw if k not in READ_KEYS)), notes=tuple(notes))


def moe_path(raw: Mapping) -> dict:
    """The lab's MoE path for MaxText's keys (``moe.py`` at e591f30): ``sparse_matmul: false`` is the
    dense path at ``capacity_factor``; ``sparse_matmul: true, megablox: false`` calls
    ``jax.lax.ragged_dot`` (``--moe ragged_dot``: what pip jaxlib 0.10.2 runs; ``--moe grouped``
    shows the grouped-GEMM kernel a tuned deployment runs instead); ``megablox: true`` (MaxText's
    default) runs a TPU Pallas kernel in interpret mode on a GPU, which the lab does not model."""
    factor = float(raw.get("capacity_factor", -1.0))
    if raw.get("sparse_matmul", True) is False:
        return {"dispatch": "dense", "capacity_factor": factor if factor > 0 else -1.0}
    if raw.get("megablox", True) is not False:
        raise ValueError("megablox: true on a GPU: MaxText runs its Megablox kernel (TPU Pallas) in interpret mode "
                         "there (moe.py), not a GPU kernel; set megablox: false (jax.lax.ragged_dot, as MaxText's GPU "
                         "configs do) or sparse_matmul: false (the dense path)")
    moe = {"dispatch": "ragged_dot"}
    if float(raw.get("ragged_buffer_factor", -1.0)) > 0:
        moe["ragged_buffer_factor"] = float(raw["ragged_buffer_factor"])
    return moe


# ----------------------------------------------------------------------------- out

def split_mesh(mesh: Mapping[str, int], gpus_per_host: int) -> tuple[dict[str, int], dict[str, int]]:
    """The lab's mesh as MaxText's (ici, dcn) sizes: tensor, then expert, fsdp and data take the GPUs
    of a host first (their collectives ride NVLink), the rest of each axis spans hosts."""
    left = gpus_per_host
    ici, dcn = {}, {}
    for axis in ("tensor", "expert", "fsdp", "data"):
        size = int(mesh.get(axis, 1))
        inside = math.gcd(size, left)
        ici[axis], dcn[axis] = inside, size // inside
        left //= inside
    return ici, dcn


def overrides(cfg, policy, batch: int, seq: int, mesh: Mapping[str, int], num_devices: int, gpus_per_host: int,
              state: StateConfig = StateConfig()) -> dict[str, Any]:
    """The lab's choices as MaxText overrides, with MaxText's key names (``EXPORTED_KEYS``)."""
    cfg = model_configs.config(cfg)
    maxtext_name = next((m for m, lab in MODEL_NAMES.items() if lab == cfg.name), None)
    if maxtext_name is None:
        raise ValueError(f"{cfg.name} is not a MaxText model: the lab exports {', '.join(MODEL_NAMES.values())}")
    if cfg.attention not in EXPORT_ATTENTION:
        raise ValueError(f"attention {cfg.attention!r} has no MaxText equivalent: export {', '.join(EXPORT_ATTENTION)}")
    emitted = _emitted(cfg)
    resolved = policies.resolve(policy, emitted=emitted)
    out: dict[str, Any] = {"model_name": maxtext_name, "hardware": "gpu"}
    if resolved.name in policies.PRESETS and not isinstance(policy, Mapping):
        out["remat_policy"] = resolved.name
    else:  # the names this model emits; MaxText's defaults (remat; the layer input on device) cover the rest
        out["remat_policy"] = "custom"
        spec = {k: v for k, v in resolved.to_custom_spec().items() if k in emitted}
        if spec.get("decoder_layer_input") == "remat":  # the scan carry is kept whatever a policy says
            spec["decoder_layer_input"] = "device"
        out.update(spec)
    micro, n_acc = batch // state.gradient_accumulation_steps, state.gradient_accumulation_steps
    if micro * n_acc != batch:
        raise ValueError(f"batch {batch} is not {n_acc} equal microbatches (gradient_accumulation_steps)")
    # MaxText's per_device_batch_size is one microbatch's: global = it x devices x accumulation steps
    out["per_device_batch_size"] = micro / num_devices if micro % num_devices else micro // num_devices
    out["max_target_length"] = seq
    ici, dcn = split_mesh(mesh, min(gpus_per_host, num_devices))
    for axis in LAB_AXES:
        out[f"ici_{axis}_parallelism"] = ici[axis]
        out[f"dcn_{axis}_parallelism"] = dcn[axis]
    out["attention"] = EXPORT_ATTENTION[cfg.attention]
    if cfg.moe is not None:  # grouped and ragged_dot are MaxText's sparse path (its GPU code calls ragged_dot)
        sparse = cfg.moe.dispatch != "dense"
        out.update({"sparse_matmul": sparse, "megablox": False, "capacity_factor": float(cfg.moe.capacity_factor)})
        if sparse and cfg.moe.ragged_buffer_factor > 0:
            out["ragged_buffer_factor"] = float(cfg.moe.ragged_buffer_factor)
    out["gradient_accumulation_steps"] = state.gradient_accumulation_steps
    out["optimizer_memory_host_offload"] = state.optimizer_memory_host_offload
    out["parameter_memory_host_offload"] = state.parameter_memory_host_offload
    return out


def _emitted(cfg) -> frozenset[str]:
    from . import models

    return models.checkpoint_names(cfg)


EXPORTED_KEYS = ("model_name", "hardware", "remat_policy", *policies.TENSOR_NAMES, "per_device_batch_size",
                 "max_target_length", *(f"{g}_{a}_parallelism" for a in LAB_AXES for g in ("ici", "dcn")), "attention",
                 "sparse_matmul", "megablox", "capacity_factor", "gradient_accumulation_steps",
                 "optimizer_memory_host_offload", "parameter_memory_host_offload")


def to_yaml(values: Mapping[str, Any]) -> str:
    """Overrides as a YAML fragment to paste into (or pass with) a MaxText config."""
    import yaml

    return yaml.safe_dump(dict(values), sort_keys=False, default_flow_style=False)


def command_line(values: Mapping[str, Any], environment: Mapping[str, str] | None = None,
                 entry: str = "python3 -m maxtext.train src/maxtext/configs/base.yml") -> str:
    """``[ENV=...] python3 -m maxtext.train base.yml key=value ...``: MaxText takes overrides as key=value."""
    def text(v):
        return str(v).lower() if isinstance(v, bool) else (f"{v:g}" if isinstance(v, float) else str(v))

    env = " ".join(f"{k}={_quote(v)}" for k, v in (environment or {}).items())
    args = " ".join(f"{k}={text(v)}" for k, v in values.items())
    return " ".join(filter(None, [env, entry, args]))


def _quote(value: str) -> str:
    """A shell word: as is when plain, in double quotes when it has spaces or single quotes (XLA_FLAGS
    carries ``--xla_gpu_enable_command_buffer=''``), else ``shlex.quote``."""
    import shlex

    if value and all(c.isalnum() or c in "-_=.,:/+@%" for c in value):
        return value
    if not any(c in value for c in '"$`\\!'):
        return f'"{value}"'
    return shlex.quote(value)
