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
import difflib
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..ground import policies
from ..models import configs as model_configs
from ..ground.state import StateConfig

# MaxText model_name -> the lab's config: every model MaxText's GPU configs name (configs/gpu/models/*.yml), and
# Llama 3.1 and DeepSeek-V3
MODEL_NAMES = {**{n: n for n in ("llama2-7b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-8b", "llama3.1-70b",
                                  "llama3.1-405b", "mixtral-8x7b", "mixtral-8x22b")},
               "deepseek3-671b": "deepseek-v3-671b"}
_KEYS = json.loads((Path(__file__).with_name("data") / "maxtext_keys.json").read_text())
MAXTEXT_KEYS = frozenset(_KEYS["keys"])  # every key MaxText's config accepts (pyconfig refuses any other)
BASE_DEFAULTS: dict[str, Any] = _KEYS["defaults"]  # base.yml's values for the keys the lab reads
# MaxText's model-file keys (configs/models/<model_name>.yml) -> the lab's ModelConfig fields (Moe's after the dot)
MODEL_FILE_KEYS = {"base_emb_dim": "d_model", "base_num_query_heads": "num_heads", "base_num_kv_heads": "num_kv_heads",
                   "base_mlp_dim": "mlp_dim", "base_num_decoder_layers": "num_layers", "head_dim": "head_dim",
                   "vocab_size": "vocab_size", "base_moe_mlp_dim": "moe.expert_mlp_dim",
                   "num_experts": "moe.num_experts", "num_experts_per_tok": "moe.experts_per_token",
                   "shared_experts": "moe.shared_experts", "first_num_dense_layers": "moe.first_dense_layers"}
HARDWARE = ("gpu", "tpu")  # MaxText's hardware values the lab exports (it reads gpu_multiprocess as gpu)
LAB_AXES = ("data", "fsdp", "tensor", "expert")  # MaxText's mesh axes the lab models
OTHER_AXES = ("diloco", "fsdp_transpose", "sequence", "context", "context_usp_ulysses", "context_autoregressive",
              "tensor_sequence", "autoregressive", "pipeline")  # in base.yml; the lab models them at 1 only
# MaxText attention -> the lab's: on a GPU MaxText's automatic choice and 'flash' run a fused flash
# kernel (cuDNN's via Transformer Engine for 'cudnn_flash_te'), which the lab's 'flash' is
ATTENTION = {"autoselected": "flash", "flash": "flash", "cudnn_flash_te": "flash", "dot_product": "dot_product"}
EXPORT_ATTENTION = {"flash": "cudnn_flash_te", "dot_product": "dot_product"}
# on a TPU MaxText's 'flash' runs its Pallas splash kernel (layers/attention_op.py), which the lab's fused flash is
EXPORT_ATTENTION_TPU = {"flash": "flash", "dot_product": "dot_product"}
REMAT_CHOICES = ("remat", "device", "offload")
# Values the lab's compiles assume; a config asking for others is refused
FIXED = {"dtype": "bfloat16", "weight_dtype": "float32", "global_parameter_scale": 1}
READ_KEYS = frozenset({"base_config", "scan_layers", "override_model_config", *MODEL_FILE_KEYS,
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
    dims: dict = dataclasses.field(default_factory=dict)  # ModelConfig changes from MaxText's dimension keys
    scan_layers: bool = True
    state: StateConfig = StateConfig()
    not_modelled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # how the lab read what the config leaves to the software stack
    hardware: str | None = None  # gpu (MaxText's gpu and gpu_multiprocess), tpu, or None (unset: the target's)

    def check_target(self, target) -> None:
        """Refuse a target of the other kind than the config's ``hardware`` (one line, naming both)."""
        if self.hardware is not None and target.is_tpu != (self.hardware == "tpu"):
            raise ValueError(f"hardware: {self.hardware} in the config, but --target {target.name} is a "
                             f"{'TPU' if target.is_tpu else 'GPU'}: give a {self.hardware.upper()} target or set "
                             f"hardware={'tpu' if target.is_tpu else 'gpu'}")

    def config(self):
        """The lab's model config, with the run's dimensions, layer scan, attention and MoE."""
        cfg = model_configs.config(self.model, attention=self.attention, scan_layers=self.scan_layers,
                                   **{k: v for k, v in self.dims.items() if not k.startswith("moe.")})
        moe = {**{k[4:]: v for k, v in self.dims.items() if k.startswith("moe.")}, **self.moe}
        return cfg.with_moe(**moe) if moe else cfg

    def mesh(self, num_devices: int, gpus_per_host: int) -> dict[str, int]:
        """The lab's mesh: each axis ici x dcn, the ``-1`` axes filled (ici per host, dcn over hosts)."""
        if num_devices % gpus_per_host and num_devices > gpus_per_host:
            raise ValueError(f"{num_devices} GPUs are not whole hosts of {gpus_per_host}")
        per_host = min(gpus_per_host, num_devices)
        ici = _fill(self.ici, per_host, "ici", f"the {per_host} GPUs of a host")
        dcn = _fill(self.dcn, num_devices // per_host, "dcn", f"{num_devices // per_host} hosts")
        return {a: ici[a] * dcn[a] for a in LAB_AXES}

    def global_batch(self, num_devices: int) -> int:
        """MaxText's global batch: int(per_device_batch_size x every device) sequences a microbatch, times
        gradient_accumulation_steps (``calculate_global_batch_sizes`` in MaxText's configs/types.py at
        e591f30: below 1 per device it loads one sequence per device and trains on the int() of it)."""
        micro = int(self.per_device_batch_size * num_devices)
        if micro < 1:
            raise ValueError(f"per_device_batch_size {self.per_device_batch_size:g} x {num_devices} GPUs trains on "
                             f"{micro} sequences: give at least 1 / {num_devices}")
        return micro * self.state.gradient_accumulation_steps


def _fill(axes: Mapping[str, int], total: int, group: str, what: str) -> dict[str, int]:
    """One group's axes with its ``-1`` filled (``sharding.parse_mesh``'s rules), errors naming the group."""
    from ..ground import sharding

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


def read(source: str | Path | Mapping[str, Any], overrides: Sequence[str] = (),
         sparse_kernel: str = "ragged_dot") -> MaxTextRun:
    """A MaxText run — its config file (or the mapping) and ``key=value`` command-line ``overrides`` —
    as the lab's inputs, assembled as MaxText's ``pyconfig`` does (``assemble``; what MaxText would
    reject is said in ``notes`` with the correction the lab answers for). MaxText's sparse MoE path is
    read as ``sparse_kernel``: ``ragged_dot`` (what its GPU code calls, as pip jaxlib 0.10.2 runs it) or
    ``grouped`` (the grouped-GEMM kernel a tuned deployment runs for the same call); no MaxText key
    chooses between them, the jaxlib does."""
    if sparse_kernel not in ("ragged_dot", "grouped"):
        raise ValueError(f"sparse_kernel {sparse_kernel!r}: choose ragged_dot or grouped")
    raw, user, notes = assemble(source, overrides)
    cfg = model_configs.config(MODEL_NAMES[raw["model_name"]])
    for key, value in FIXED.items():
        if raw[key] != value:
            raise ValueError(f"{key}: {raw[key]!r} is not modelled (the lab compiles {key}: {value!r})")
    if "hardware" not in user:
        notes.append(f"hardware: not set (base.yml's default is {raw['hardware']}); the lab reads the target's")
        hardware = None
    elif raw["hardware"] in ("gpu", "gpu_multiprocess", "tpu"):
        hardware = "tpu" if raw["hardware"] == "tpu" else "gpu"
    else:
        raise ValueError(f"hardware: {raw['hardware']!r}: the lab models NVIDIA GPUs (gpu, gpu_multiprocess) and "
                         "TPUs (tpu)")
    attention = raw["attention"]
    if attention not in ATTENTION:
        raise ValueError(f"attention {attention!r}: the lab models {', '.join(ATTENTION)}")
    scan = raw["scan_layers"]
    if not isinstance(scan, bool):
        raise ValueError(f"scan_layers: {scan!r}: true or false")
    moe = _moe(raw, cfg, sparse_kernel, notes) if cfg.moe is not None else {}
    ici, dcn = _mesh_axes(raw)
    return MaxTextRun(
        model=cfg.name, policy=_policy(raw, notes), per_device_batch_size=float(raw["per_device_batch_size"]),
        seq=int(raw["max_target_length"]), ici=ici, dcn=dcn, attention=ATTENTION[attention], moe=moe,
        dims=_dims(raw, user, cfg), scan_layers=scan,
        state=StateConfig(gradient_accumulation_steps=int(raw["gradient_accumulation_steps"]),
                          optimizer_memory_host_offload=bool(raw["optimizer_memory_host_offload"]),
                          parameter_memory_host_offload=bool(raw["parameter_memory_host_offload"])),
        not_modelled=tuple(sorted(k for k in user if k not in READ_KEYS)), notes=tuple(notes), hardware=hardware)


def _policy(raw: Mapping, notes: list[str]) -> str | dict:
    """MaxText's ``remat_policy`` (``custom``: its per-tensor keys, base.yml's defaults where unset)."""
    policy = raw["remat_policy"]
    if policy == "minimal_flash":
        notes.append("remat_policy: minimal_flash is MaxText's deprecated alias of minimal_with_context (decoders.py "
                     "get_remat_policy)")
        return "minimal_with_context"
    if policy == "custom":
        spec = {k: raw[k] for k in policies.TENSOR_NAMES if k in raw}
        bad = {k: v for k, v in spec.items() if v not in REMAT_CHOICES}
        if bad:
            raise ValueError(f"custom remat values {bad}: choose one of {', '.join(REMAT_CHOICES)}")
        return spec
    if policy not in policies.PRESETS or policy == "no_remat":
        raise ValueError(f"remat_policy {policy!r}: MaxText's are custom, "
                         f"{', '.join(p for p in policies.PRESETS if p != 'no_remat')}")
    return policy


def _mesh_axes(raw: Mapping) -> tuple[dict[str, int], dict[str, int]]:
    """The ``ici_*`` and ``dcn_*`` sizes of the lab's axes; any other MaxText axis must be 1."""
    for group in ("ici", "dcn"):
        for axis in OTHER_AXES:
            if int(raw.get(f"{group}_{axis}_parallelism", 1)) != 1:
                raise ValueError(f"{group}_{axis}_parallelism: {raw[f'{group}_{axis}_parallelism']} is not modelled "
                                 f"(the lab's mesh axes: {', '.join(LAB_AXES)})")
    ici, dcn = ({a: int(raw[f"{g}_{a}_parallelism"]) for a in LAB_AXES} for g in ("ici", "dcn"))
    return ici, dcn


def _dims(raw: Mapping, user: set[str], cfg) -> dict[str, Any]:
    """The model dimensions the run changes from the model's file (``base_num_decoder_layers=5`` on the
    command line, with ``override_model_config``); a key for a part the model lacks is refused."""
    dims = {}
    for key, field in MODEL_FILE_KEYS.items():
        if key not in user:
            continue
        lab = _model_value(cfg, field)
        if lab is None:
            raise ValueError(f"{key}: {raw[key]!r} is not modelled for {raw['model_name']} (it has no routed experts)")
        if raw[key] != lab:
            dims[field] = raw[key]
    return dims


def _moe(raw: Mapping, cfg, sparse_kernel: str, notes: list[str]) -> dict:
    """``moe_path``, with MaxText's sparse path read as ``sparse_kernel`` and notes saying so."""
    moe = moe_path(raw)
    if moe["dispatch"] != "ragged_dot":
        return moe
    moe["dispatch"] = sparse_kernel
    notes.append("MoE: MaxText's sparse path read as jax.lax.ragged_dot, as pip jaxlib 0.10.2 runs it (every "
                 "row times every local expert); --moe grouped shows it as a grouped-GEMM kernel"
                 if sparse_kernel == "ragged_dot" else
                 "MoE: MaxText's sparse path read as a grouped-GEMM kernel (a tuned deployment's; pip jaxlib "
                 "0.10.2 runs jax.lax.ragged_dot densely instead: --moe ragged_dot)")
    if float(raw["capacity_factor"]) > 0:
        notes.append(f"capacity_factor: {raw['capacity_factor']} has no effect on MaxText's sparse path (moe.py reads "
                     "it in dense_matmul only): the sparse path is dropless but for ragged_buffer_factor")
    return moe


def _model_value(cfg, field: str):
    """A ModelConfig field (``moe.x`` for the Moe's), None where the model has no such part."""
    if field.startswith("moe."):
        return getattr(cfg.moe, field[4:]) if cfg.moe is not None else None
    return getattr(cfg, field)


def model_file(model: str) -> dict[str, Any]:
    """The keys of MaxText's ``configs/models/<model_name>.yml`` the lab models, with the lab's values of
    them (the lab's catalog carries those files' dimensions, ``models/configs.py``)."""
    cfg = model_configs.config(MODEL_NAMES[model])
    out = {key: _model_value(cfg, field) for key, field in MODEL_FILE_KEYS.items()}
    if cfg.mla is not None:  # DeepSeek's file leaves head_dim to base.yml (MLA's head dims are their own keys)
        del out["head_dim"]
    if cfg.moe is None or cfg.mla is None:  # Mixtral's file sets no shared experts and no dense layers
        out.pop("shared_experts"), out.pop("first_num_dense_layers")
    return {k: v for k, v in out.items() if v is not None}


def assemble(source: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()) -> tuple[dict[str, Any], set[str], list[str]]:
    """A MaxText run's keys as MaxText's ``pyconfig`` assembles them (``_initialize_pydantic`` at e591f30):
    ``base.yml``'s defaults, the config file over its ``base_config`` chain, then the model's file
    ``configs/models/<model_name>.yml`` (which wins over the config file), then the command line's
    ``key=value`` overrides (each value YAML-typed, ``OmegaConf.from_cli``; a later one wins).

    Returns the keys, the keys the user set (the config files but MaxText's own ``base.yml``, and the
    command line) and notes: what MaxText itself would reject — a config path that does not exist, an
    argument without ``=``, a command-line value that contradicts the model's file — with the correction
    the lab reads instead. A key MaxText does not have is an error, as it is MaxText's
    (``pyconfig._prepare_for_pydantic``)."""
    notes: list[str] = []
    if isinstance(source, Mapping):
        defaults, values = {}, dict(source)
    else:
        defaults, values = _load_chain(_config_path(Path(source), notes))
    cli = parse_overrides(overrides, notes)
    for key in [*values, *cli]:
        if key not in MAXTEXT_KEYS:
            close = difflib.get_close_matches(key, sorted(MAXTEXT_KEYS), n=3, cutoff=0.75)
            raise ValueError(f"{key!r} is not a MaxText key (pyconfig refuses it)"
                             + (f"; did you mean {' or '.join(close)}?" if close else ""))
    name = {**BASE_DEFAULTS, **defaults, **values, **cli}["model_name"]
    if name not in MODEL_NAMES:
        raise ValueError(f"model_name {name!r}: the lab has {', '.join(MODEL_NAMES)}")
    model = model_file(name)
    for key, value in model.items():
        if key in values and values[key] != value:
            notes.append(f"{key}: {values[key]!r} in the config file is not what MaxText runs: it merges "
                         f"configs/models/{name}.yml after the file, whose {key} is {value!r}")
    clash = [k for k in model if k in cli and cli[k] != model[k]]
    if clash and not {**values, **cli}.get("override_model_config", False):
        notes.append(f"MaxText rejects this run: {', '.join(f'{k}={cli[k]!r}' for k in clash)} contradict"
                     f"{'s' if len(clash) == 1 else ''} configs/models/{name}.yml "
                     "(pyconfig.validate_no_keys_overridden_twice); the lab answers for it with "
                     "override_model_config=true, where the command line wins")
    raw = {**BASE_DEFAULTS, **defaults, **values, **{k: v for k, v in model.items() if k not in cli}, **cli}
    return raw, {*values, *cli}, notes


def parse_overrides(tokens: Sequence[str], notes: list[str]) -> dict[str, Any]:
    """MaxText's command-line ``key=value`` overrides, YAML-typed as ``OmegaConf.from_cli`` types them. A
    token without ``=`` is a key with no value to MaxText, which it then refuses as unknown: the lab pairs
    a ``key:`` token with the value after it (``enable_checkpointing: False``), says so, and refuses any
    other such token."""
    import yaml

    out, i = {}, 0
    while i < len(tokens):
        token = tokens[i]
        key, sep, value = token.partition("=")
        if not sep:
            if token.endswith(":") and i + 1 < len(tokens) and "=" not in tokens[i + 1]:
                notes.append(f"MaxText rejects the arguments {token!r} {tokens[i + 1]!r} (an argument without '=' is "
                             f"a key of its own to OmegaConf.from_cli: {token!r} is not a MaxText key); the lab reads "
                             f"{token[:-1]}={tokens[i + 1]}")
                key, value, i = token[:-1], tokens[i + 1], i + 1
            else:
                raise ValueError(f"override {token!r} is not key=value (MaxText's command line: key=value ...)")
        if not key:
            raise ValueError(f"override {token!r} has no key")
        try:
            out[key] = yaml.safe_load(value) if value else None
        except yaml.YAMLError:
            out[key] = value
        i += 1
    return out


def _config_path(path: Path, notes: list[str]) -> Path:
    """The config file, as MaxText resolves it (``pyconfig.resolve_config_path``: a path that is not a
    file fails); where a MaxText recipe names a file that does not exist but its GPU config does —
    ``models/gpu/X.yml`` or ``models/X.yml`` for ``gpu/models/X.yml`` — the lab reads that and says so."""
    if path.is_file():
        return path
    parts = path.parts
    candidates = []
    if len(parts) >= 3 and parts[-3:-1] == ("models", "gpu"):
        candidates.append(Path(*parts[:-3], "gpu", "models", parts[-1]))
    if len(parts) >= 2 and parts[-2] == "models":
        candidates.append(Path(*parts[:-2], "gpu", "models", parts[-1]))
    for candidate in candidates:
        if candidate.is_file():
            notes.append(f"MaxText rejects this run: its config file {str(path)!r} does not exist (MaxText at e591f30 "
                         f"fails to load it); the lab reads {str(candidate)!r}")
            return candidate
    raise ValueError(f"MaxText config {str(path)!r} does not exist")


def _load_chain(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A config file over its ``base_config`` chain (``pyconfig._load_config``: next to the file, else in
    MaxText's configs folder, which the lab looks for above the file), as (MaxText's ``base.yml``
    defaults where the chain reaches it, the keys of every other file in it)."""
    values = _load(path)
    if path.name == "base.yml":
        return values, {}
    base = values.get("base_config")
    for folder in (path.parent, *path.parents) if base else ():
        candidate = folder / base
        if candidate.is_file() and candidate.resolve() != path.resolve():
            defaults, above = _load_chain(candidate)
            return defaults, {**above, **values}
    return {}, values  # base.yml's defaults for the keys the lab reads are BASE_DEFAULTS


def moe_path(raw: Mapping) -> dict:
    """The lab's MoE path for MaxText's keys (``moe.py`` at e591f30): ``sparse_matmul: false`` is the
    dense path at ``capacity_factor``; ``sparse_matmul: true, megablox: false`` calls
    ``jax.lax.ragged_dot`` (``--moe ragged_dot``: what pip jaxlib 0.10.2 runs; ``--moe grouped``
    shows the grouped-GEMM kernel a tuned deployment runs instead); ``megablox: true`` (MaxText's
    default) runs a TPU Pallas kernel in interpret mode on a GPU, which the lab does not model."""
    raw = {**BASE_DEFAULTS, **raw}
    factor = float(raw["capacity_factor"])
    if raw["sparse_matmul"] is False:
        return {"dispatch": "dense", "capacity_factor": factor if factor > 0 else -1.0}
    if raw["megablox"] is not False:
        raise ValueError("megablox: true on a GPU: MaxText runs its Megablox kernel (TPU Pallas) in interpret mode "
                         "there (moe.py), not a GPU kernel; set megablox: false (jax.lax.ragged_dot, as MaxText's GPU "
                         "configs do) or sparse_matmul: false (the dense path)")
    moe = {"dispatch": "ragged_dot"}
    if float(raw["ragged_buffer_factor"]) > 0:
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


def model_and_dims(cfg) -> tuple[str, dict[str, Any]]:
    """MaxText's ``model_name`` a config is, and the model-file keys (``MODEL_FILE_KEYS``) it changes from that
    model's file: the model as MaxText is given it (``override_model_config: true``). The base is the MaxText model
    that needs the fewest changed keys; a config no MaxText model reaches by those keys alone is refused."""
    found = []
    for maxtext_name, lab in MODEL_NAMES.items():
        base = model_configs.config(lab)
        if (base.moe is None) != (cfg.moe is None) or (base.mla is None) != (cfg.mla is None):
            continue
        fields = {f: _model_value(cfg, f) for f in MODEL_FILE_KEYS.values() if _model_value(base, f) is not None}
        plain = {f: v for f, v in fields.items() if not f.startswith("moe.")}
        rebuilt = base.replace(name=cfg.name, attention=cfg.attention, scan_layers=cfg.scan_layers,
                               flash_kernel=cfg.flash_kernel, flash_block=cfg.flash_block,
                               attention_chunk=cfg.attention_chunk, moe=cfg.moe, **plain)
        if rebuilt == cfg:
            found.append((maxtext_name, {k: fields[f] for k, f in MODEL_FILE_KEYS.items()
                                         if f in fields and fields[f] != _model_value(base, f)}))
    if not found:
        raise ValueError(f"{cfg.name} is neither a MaxText model nor one reached from one by its model file's keys "
                         f"({', '.join(MODEL_FILE_KEYS)}): the lab exports {', '.join(MODEL_NAMES)} and those")
    return min(found, key=lambda named: len(named[1]))


def overrides(cfg, policy, batch: int, seq: int, mesh: Mapping[str, int], num_devices: int, gpus_per_host: int,
              state: StateConfig = StateConfig(), hardware: str = "gpu") -> dict[str, Any]:
    """The lab's choices as MaxText overrides, with MaxText's key names (``EXPORTED_KEYS``); a model MaxText does not
    name goes as the MaxText model it is reached from with ``override_model_config`` (``model_and_dims``)."""
    cfg = model_configs.config(cfg)
    if hardware not in HARDWARE:
        raise ValueError(f"hardware {hardware!r}: choose {', '.join(HARDWARE)}")
    maxtext_name, dims = model_and_dims(cfg)
    if cfg.attention not in EXPORT_ATTENTION:
        raise ValueError(f"attention {cfg.attention!r} has no MaxText equivalent: export {', '.join(EXPORT_ATTENTION)}")
    emitted = _emitted(cfg)
    resolved = policies.resolve(policy, emitted=emitted)
    out: dict[str, Any] = {"model_name": maxtext_name, "hardware": hardware}
    if dims:  # MaxText's way to another width or depth: the model file's keys, which the command line may override
        out.update({"override_model_config": True, **dims})
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
    out["attention"] = (EXPORT_ATTENTION_TPU if hardware == "tpu" else EXPORT_ATTENTION)[cfg.attention]
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
    from .. import models

    return models.checkpoint_names(cfg)


EXPORTED_KEYS = ("model_name", "hardware", "override_model_config", *MODEL_FILE_KEYS, "remat_policy", *policies.TENSOR_NAMES, "per_device_batch_size",
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


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A MaxText GPU recipe script (``configs/gpu/a3/<model>/<n>vm.sh``) as written: the ``XLA_FLAGS`` it
    exports and the arguments of its ``python3 -m maxtext...`` command after the module (the config
    file, then its ``key=value`` overrides), its shell variables filled in."""

    xla_flags: str
    argv: tuple[str, ...]


def recipe(script: str | Path, variables: Mapping[str, str]) -> Recipe:
    """Read a MaxText GPU recipe as a shell would run it: ``${VAR}``, ``${VAR:-default}`` and ``$VAR`` from
    ``variables`` (the recipes' default configs folder, ``${MAXTEXT_CONFIGS_DIR:-${MAXTEXT_REPO_ROOT:-$PWD}/
    src/maxtext/configs}``, from ``MAXTEXT_CONFIGS_DIR``); a variable the script uses and ``variables``
    lacks is refused in one line, naming it."""
    import re
    import shlex

    text = Path(script).read_text() if isinstance(script, Path) or "\n" not in str(script) else str(script)
    if 'export XLA_FLAGS="' not in text or "python3 -m maxtext" not in text:
        raise ValueError("not a MaxText GPU recipe: it should export XLA_FLAGS=\"...\" and run python3 -m maxtext...")

    def fill(s: str) -> str:
        s = s.replace("${MAXTEXT_CONFIGS_DIR:-${MAXTEXT_REPO_ROOT:-$PWD}/src/maxtext/configs}",
                      "${MAXTEXT_CONFIGS_DIR}")

        def value(match) -> str:
            name = match.group(1) or match.group(2)
            if name not in variables:
                raise ValueError(f"the recipe uses ${name}: give it a value (variables: {', '.join(sorted(variables))})")
            return variables[name]

        return re.sub(r"\$\{(\w+)(?::-[^}]*)?\}|\$(\w+)", value, s)

    xla_flags = fill(text.split('export XLA_FLAGS="', 1)[1].split('"', 1)[0])
    command = text[text.index("python3 -m maxtext"):].replace("\\\n", " ").splitlines()[0]
    words = shlex.split(fill(command))
    return Recipe(" ".join(xla_flags.split()), tuple(words[3:]))
