"""Flag sets and flag values: MaxText's GPU recipe, the lab's workarounds, ``FlagSet`` and ``resolve``; parsing
``XLA_FLAGS`` (validated before XLA sees it), compiler options, defaults, the export."""

from __future__ import annotations

import dataclasses
import difflib
import re
import shlex
from typing import Any, Mapping

from .catalog import (
    ABSENT, CATALOG, EFFORT_LEVELS, Flag, JAX_OPTIMIZATION_LEVEL, LAB_OWNED, OPTIMIZATION_LEVELS, TOPICS,
    _PROTO_ENUM_PREFIX, format_value
)
from .versions import INSTALLED_JAXLIB, KNOWN, KNOWN_JAXLIB, _rename_of, _respell, for_jaxlib, version_key


# ----------------------------------------------------------------------------- flag sets

# MaxText's GPU recipe as its main spells it (src/maxtext/configs/gpu/a3/llama_3.1_405b/128vm.sh at e591f30c,
# 2026-08-22: the flag set of every configs/gpu/a3 script, and NVIDIA JAX-Toolbox's MaxText README but for
# thresholds; the collective pipeliners as --xla_gpu_pipeline_*=on since 834e861b, 2026-08-06). On jaxlib
# 0.10.2 those three are respelled --xla_gpu_enable_pipelined_*=true (``for_jaxlib``).
MAXTEXT_GPU: dict[str, Any] = {
    "xla_gpu_enable_latency_hiding_scheduler": True,
    "xla_gpu_enable_triton_gemm": False,
    "xla_gpu_enable_command_buffer": (),
    "xla_gpu_enable_highest_priority_async_stream": True,
    "xla_gpu_all_reduce_combine_threshold_bytes": 1073741824,
    "xla_gpu_all_gather_combine_threshold_bytes": 134217728,
    "xla_gpu_reduce_scatter_combine_threshold_bytes": 134217728,
    "xla_gpu_pipeline_all_gather": "ON",
    "xla_gpu_pipeline_reduce_scatter": "ON",
    "xla_gpu_pipeline_all_reduce": "ON",
    "xla_gpu_enable_while_loop_double_buffering": True,
    "xla_gpu_enable_all_gather_combine_by_dim": False,
    "xla_gpu_enable_reduce_scatter_combine_by_dim": False,
    "xla_disable_hlo_passes": ("rematerialization",),
}
PRESETS: dict[str, dict[str, Any]] = {"maxtext_gpu": MAXTEXT_GPU, "none": {}}
DEFAULT_PRESET = "maxtext_gpu"
PIPELINED_HOST_OFFLOADING = "xla_gpu_enable_pipelined_host_offloading"  # the flag notebooks 04-07 turn on

# The lab's fix for openxla/xla #46231 (jaxlib 0.10.2): without XLA's DynamicSliceAnnotator, no
# dynamic-slice gets a precomputed memcpy descriptor, so an offloaded scan residual read at the
# reversed index L-1-i is sliced by a kernel that reads the index at run time (still async) - a kLoop
# fusion whose threads read and write the pinned host buffer over the link, on the SMs, where the
# descriptor's path was a copy-engine memcpy (companion.workaround prices the difference).
DESCRIPTOR_FIX_PASS = "dynamic-slice-annotator"
WORKAROUNDS: dict[str, str] = {
    "offload_descriptors": f"--xla_disable_hlo_passes={DESCRIPTOR_FIX_PASS}: no wrong memcpy descriptors for "
                           "offloaded scan residuals (openxla/xla #46231, fixed by #46308 after jaxlib 0.10.2)",
}
# Whether a jaxlib's XLA gives the reversed scan read a wrong memcpy descriptor, as descriptors.check finds it on
# tests/test_descriptors.py's 4-layer offloaded scan compiled without the workaround (the test asserts the installed
# jaxlib's entry; the stored HLOs of both are tests/data/). A jaxlib not listed: the bug is assumed below the
# first one found right (the fix, openxla/xla #46308 of 2026-07-28, came after jax 0.11.0 was cut).
DESCRIPTOR_BUG: dict[str, bool] = {"0.10.2": True, "0.12.0.1": False}


def preset(name: str) -> dict[str, Any]:
    """A copy of a named flag set: ``maxtext_gpu`` (what MaxText GPU users run) or ``none`` (XLA's defaults)."""
    if name not in PRESETS:
        raise ValueError(f"unknown XLA flag preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return dict(PRESETS[name])


def has_descriptor_bug(jaxlib: str) -> bool:
    """Whether ``jaxlib``'s XLA has openxla/xla #46231 (``DESCRIPTOR_BUG``; unlisted: below the first found right)."""
    if jaxlib in DESCRIPTOR_BUG:
        return DESCRIPTOR_BUG[jaxlib]
    first_right = min((v for v, bug in DESCRIPTOR_BUG.items() if not bug), key=version_key)
    return version_key(jaxlib) < version_key(first_right)


@dataclasses.dataclass(frozen=True)
class FlagSet:
    """The XLA flags of one compile: a preset, the caller's overrides, and the lab's workarounds."""

    preset: str
    flags: dict[str, Any]  # validated {name: value}, everything that is passed to XLA
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    workarounds: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what the lab left out of the caller's flags, and why
    platform: str = "gpu"  # gpu: XLA:GPU's flags (XLA_FLAGS); tpu: libtpu's (LIBTPU_INIT_ARGS, companion.libtpu)

    def describe(self) -> str:
        parts = [self.preset]
        if self.overrides:
            parts.append(self._text(self.overrides))
        parts += [f"+ {w} fix" for w in self.workarounds]
        return " ".join(parts)

    def _text(self, flags: Mapping[str, Any]) -> str:
        if self.platform == "tpu":  # validated by companion.libtpu when the set was made
            return " ".join(f"--{name}={shlex.quote(format_value(value))}" for name, value in flags.items())
        return to_xla_flags(flags)

    def xla_flags(self) -> str:
        """The whole set as one flag string: ``XLA_FLAGS`` on a GPU, ``LIBTPU_INIT_ARGS`` on a TPU."""
        return self._text(self.flags)

    def compiler_options(self) -> dict[str, Any]:
        return to_compiler_options(self.flags)

    def to_dict(self) -> dict:
        out = {"preset": self.preset, "overrides": {k: format_value(v) for k, v in self.overrides.items()},
               "workarounds": list(self.workarounds), "notes": list(self.notes), "xla_flags": self.xla_flags()}
        return out if self.platform == "gpu" else {**out, "platform": self.platform}


def resolve(spec: "str | Mapping[str, Any] | FlagSet | None" = None, *, preset: str | None = None,
            workarounds: bool = True) -> FlagSet:
    """The flags one compile runs with.

    ``None`` is the default preset (``maxtext_gpu``); a preset name (``"none"`` for XLA's own
    defaults) may be followed by flags (``"none --xla_gpu_enable_latency_hiding_scheduler=true"``);
    flags alone (a string or a dict) apply on top of ``preset`` (default: the default preset). With
    ``workarounds`` (the default) the lab's fixes for the installed jaxlib are added, and named in
    the result.
    """
    if isinstance(spec, FlagSet):
        return spec
    name, overrides = preset or DEFAULT_PRESET, {}
    if name not in PRESETS:
        raise ValueError(f"unknown XLA flag preset {name!r}; choose one of: {', '.join(PRESETS)}")
    if isinstance(spec, Mapping):
        overrides = parse(spec)
    elif spec:
        named, text = split_preset(spec, PRESETS, "XLA flag")
        name = named or name
        overrides = parse(text)
    notes = []
    for owned, why in LAB_OWNED.items():
        if owned in overrides:
            notes.append(f"--{owned}={format_value(overrides.pop(owned))} left out: {why}")
    base, respelled = for_jaxlib(PRESETS[name], INSTALLED_JAXLIB, what=f"preset {name}")
    flags = {**base, **overrides}
    notes += respelled
    applied = []
    if workarounds and has_descriptor_bug(INSTALLED_JAXLIB):
        passes = tuple(flags.get("xla_disable_hlo_passes", ()))
        if DESCRIPTOR_FIX_PASS not in passes:
            flags["xla_disable_hlo_passes"] = (*passes, DESCRIPTOR_FIX_PASS)
        applied.append("offload_descriptors")
    return FlagSet(name, flags, overrides, tuple(applied), tuple(notes))


def from_environment(environ: Mapping[str, str]) -> str:
    """A run's ``XLA_FLAGS`` as a flag spec for ``resolve``: XLA's own defaults (preset ``none``) and
    each flag of the variable, which is everything XLA sees (validated by ``resolve``, every bad flag
    named at once)."""
    text = (environ.get("XLA_FLAGS") or "").strip()
    if not text:
        raise ValueError("--xla-flags env: XLA_FLAGS is not set (export the run's XLA_FLAGS first, or give a preset)")
    return f"none {text}"


def flag(name: str) -> Flag:
    name = name.removeprefix("--")
    if name not in CATALOG:
        raise _unknown(name, CATALOG)
    return CATALOG[name]


def _unknown(name: str, names) -> ValueError:
    pool = sorted(set(KNOWN))
    close = difflib.get_close_matches(name, pool, n=3, cutoff=0.75)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return ValueError(f"unknown XLA flag {name!r}{hint} (`python -m companion flags` lists the taught flags; "
                      f"{len(KNOWN)} names are known to jaxlib {KNOWN_JAXLIB})")


_TRUE, _FALSE = ("true", "1"), ("false", "0")  # what XLA's flag parser accepts (any case)


def _convert(name: str, raw: Any) -> Any:
    """Check one value against the flag's type; return it in Python form."""
    spec = CATALOG.get(name)
    kind = spec.kind if spec else {"int": "int", "bool": "bool", "float": "float"}.get(KNOWN[name], "string")
    bad = f"bad value {raw!r} for XLA flag {name!r}"
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"{bad}: expected true or false (or 1, 0)")
    if kind == "int":
        if isinstance(raw, bool):
            raise ValueError(f"{bad}: expected an integer")
        text = str(raw).strip()
        if not re.fullmatch(r"[+-]?\d+", text):  # no "1_000" or "1e3": XLA would abort on them
            raise ValueError(f"{bad}: expected an integer")
        return int(text)
    if kind == "float":
        try:
            return float(str(raw).strip())
        except ValueError:
            raise ValueError(f"{bad}: expected a number") from None
    if kind == "enum":
        text = str(raw).strip().upper()
        if text not in spec.choices:
            raise ValueError(f"{bad}: choose one of {', '.join(spec.choices)}")
        return text
    if kind in ("enum_list", "string_list"):
        items = raw if isinstance(raw, (list, tuple)) else str(raw).strip("'\"").split(",")
        items = tuple(str(i).strip() for i in items if str(i).strip())
        if kind == "enum_list":
            items = tuple(i.upper() for i in items)
            for item in items:
                if item.lstrip("+-") not in spec.choices:
                    raise ValueError(f"{bad}: {item!r} is not one of {', '.join(spec.choices)}")
            signed = [i[:1] in "+-" for i in items]
            if any(signed) and not all(signed):
                raise ValueError(f"{bad}: either list the types, or edit the default with +TYPE/-TYPE, not both")
        return items
    return str(raw)


def split_preset(spec: str, presets: Mapping[str, Any], kind: str) -> tuple[str | None, str]:
    """A flag spec's leading preset name (one of ``presets``) and the flags after it; (None, the spec) when it
    starts with a flag. ``kind`` names the flags in the error (``XLA flag``, ``libtpu flag``)."""
    text = str(spec).strip()
    first, _, rest = text.partition(" ")
    if first.startswith("--"):
        return None, text
    if first not in presets:
        raise ValueError(f"unknown {kind} preset {first!r}; choose one of: {', '.join(presets)}, "
                         "or give flags as --name=value")
    return first, rest


def flag_items(flags: str | Mapping[str, Any], env: str) -> list[tuple[str, Any]]:
    """(name, raw value) of a flag string as ``env`` holds it (``--name=value`` tokens, a bare ``--flag`` true)
    or of a ``{name: value}`` dict (names with or without ``--``); a malformed string in one line."""
    if isinstance(flags, Mapping):
        return [(str(k).removeprefix("--"), v) for k, v in flags.items()]
    try:
        tokens = shlex.split(flags)
    except ValueError as err:
        raise ValueError(f"cannot split {env} {flags!r}: {err}") from None
    items = []
    for token in tokens:
        if not token.startswith("--"):
            raise ValueError(f"bad {env} entry {token!r}: each flag is written --name=value")
        name, sep, value = token[2:].partition("=")
        items.append((name, value if sep else "true"))
    return items


def parse(flags: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate an ``XLA_FLAGS`` string or a ``{name: value}`` dict; return ``{name: value}``.

    Names may be written with or without the leading ``--``; a bare ``--flag`` means true.
    """
    if not flags:
        return {}
    items = flag_items(flags, "XLA_FLAGS")
    parsed, problems, corrected = {}, [], []
    for name, value in items:
        try:
            parsed[name] = _parse_one(name, value)
            corrected.append(f"--{name}={format_value(parsed[name])}")
        except ValueError as err:
            problems.append(str(err))
            spelled = _respell(name, value, KNOWN)
            if spelled is not None:  # the same flag as the installed jaxlib names it
                corrected.append(f"--{spelled[0]}={format_value(spelled[1]).lower()}")
    if len(problems) == 1 and len(items) == 1 and _respell(items[0][0], items[0][1], KNOWN) is None:
        raise ValueError(problems[0])
    if problems:  # every problem in one pass, and the string that would pass
        raise ValueError(f"{len(problems)} XLA flag{'s' if len(problems) > 1 else ''} jaxlib {KNOWN_JAXLIB} rejects "
                         "(XLA would abort the process on each): "
                         + " | ".join(p.removesuffix("; XLA would abort the process on it") for p in problems)
                         + f" | corrected, ready to paste: XLA_FLAGS=\"{' '.join(corrected)}\"")
    return parsed


def _parse_one(name: str, value: Any) -> Any:
    """One flag's value in Python form, or a ValueError naming it and what the installed jaxlib would take."""
    if name == JAX_OPTIMIZATION_LEVEL:
        if str(value) not in OPTIMIZATION_LEVELS:
            raise ValueError(f"bad --{name}={value}: choose one of {', '.join(OPTIMIZATION_LEVELS)}")
        return str(value)
    if name in ABSENT:
        raise ValueError(f"XLA flag {name!r} does not exist in jaxlib {KNOWN_JAXLIB}'s XLA ({ABSENT[name]}); "
                         "XLA would abort the process on it")
    if name not in KNOWN:
        rename = _rename_of(name)
        if rename is not None:
            now = rename.new if name == rename.old else rename.old
            raise ValueError(f"XLA flag {name!r} is {'--' + now if now in KNOWN else 'unknown'} in jaxlib "
                             f"{INSTALLED_JAXLIB} (renamed in {rename.since}: --{rename.old} before, "
                             f"--{rename.new} since); XLA would abort the process on it")
        raise _unknown(name, CATALOG)
    return _convert(name, value)


def to_xla_flags(flags: Mapping[str, Any]) -> str:
    """The ``XLA_FLAGS`` string for validated flags (as in ``XLA_FLAGS="..." python train.py``); JAX's
    optimization level is not an XLA flag and is left out (``export`` puts it in the environment)."""
    return " ".join(f"--{name}={shlex.quote(format_value(value))}" for name, value in parse(flags).items()
                    if name != JAX_OPTIMIZATION_LEVEL)


def to_compiler_options(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Per-compile ``compiler_options`` for ``Lowered.compile``: Python bools, ints and strings."""
    options = {}
    for name, value in flags.items():
        if name == JAX_OPTIMIZATION_LEVEL:  # a build option JAX passes beside the debug options
            options["optimization_level"] = EFFORT_LEVELS[value]
            continue
        if isinstance(value, tuple):
            if value and name in CATALOG and CATALOG[name].kind == "enum_list" and value[0][:1] in ("+", "-"):
                # +TYPE/-TYPE edit the default set
                chosen = list(CATALOG[name].default)
                for item in value:
                    if item[0] == "+" and item[1:] not in chosen:
                        chosen.append(item[1:])
                    elif item[0] == "-" and item[1:] in chosen:
                        chosen.remove(item[1:])
                value = tuple(chosen)
            value = ",".join(value)
        if name in _PROTO_ENUM_PREFIX and not str(value).startswith(_PROTO_ENUM_PREFIX[name]):
            value = _PROTO_ENUM_PREFIX[name] + str(value).upper()
        options[name] = value
    return options


def defaults(topic: str | None = None) -> dict[str, Any]:
    """Catalog defaults, optionally for one topic (see ``TOPICS``)."""
    if topic is not None and topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}; choose one of {', '.join(TOPICS)}")
    return {f.name: f.default for f in CATALOG.values() if topic is None or f.topic == topic}


# ----------------------------------------------------------------------------- export

def differences(base: FlagSet, other: FlagSet) -> dict[str, Any]:
    """The flags ``other`` sets differently from ``base`` (``None``: ``other`` leaves it at XLA's default)."""
    names = set(base.flags) | set(other.flags)
    return {n: other.flags.get(n) for n in sorted(names) if base.flags.get(n) != other.flags.get(n)}


def export(flag_set: FlagSet, *, mem_fraction: float | None = None, host_pool_gib: int | None = None,
           optimization_level: str | None = None, offloads: bool = False,
           for_jaxlib: str | None = None) -> dict[str, Any]:
    """A flag set as a user pastes it: the ``XLA_FLAGS`` string, the same as per-compile
    ``compiler_options``, and the environment variables that go with it (each validated):
    ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (JAX's allocator share of HBM), ``XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB``
    (the pinned host pool, whole GiB) and ``JAX_OPTIMIZATION_LEVEL`` (O1 turns on the latency-hiding
    scheduler, pipelined collectives and the speed-of-light estimator; at jaxlib 0.10.2 not pipelined host
    offload, flag-only since openxla/xla #37979, which 0.12's O1 turns on too, #45393).

    It names the jaxlib its spellings are for (``jaxlib``) and carries the known correctness caveats of
    a step that offloads (``offloads``) or pipelines host offloading (``caveats``, ``companion.caveats``).
    ``for_jaxlib``: spell the flags for another jaxlib of the supported range (``for_jaxlib``: renamed flags
    respelled, flags its XLA lacks dropped, the #46231 workaround exported where that jaxlib has the bug), and say
    so in ``notes``; a jaxlib older than the lab's tables is refused."""
    from ...ground import caveats
    from .. import targets

    env = {}
    if mem_fraction is not None:
        env[targets.MEM_FRACTION_ENV] = f"{targets.check_mem_fraction(mem_fraction):g}"
    if host_pool_gib is not None:
        if not isinstance(host_pool_gib, int) or isinstance(host_pool_gib, bool) or host_pool_gib < 1:
            raise ValueError(f"host_pool_gib must be a positive whole number of GiB, got {host_pool_gib!r} "
                             f"({targets.HOST_POOL_ENV} is read as an integer)")
        env[targets.HOST_POOL_ENV] = str(host_pool_gib)
    optimization_level = optimization_level or flag_set.flags.get(JAX_OPTIMIZATION_LEVEL)
    if optimization_level is not None:
        if optimization_level not in OPTIMIZATION_LEVELS:
            raise ValueError(f"unknown JAX optimization level {optimization_level!r}; choose one of: "
                             f"{', '.join(OPTIMIZATION_LEVELS)}")
        env["JAX_OPTIMIZATION_LEVEL"] = optimization_level
    xla, jaxlib, notes = _spelled_for(flag_set, for_jaxlib or INSTALLED_JAXLIB)
    shell = " ".join(f"{k}={v}" for k, v in env.items())
    pipelined = bool(flag_set.flags.get(PIPELINED_HOST_OFFLOADING, False))
    return {"XLA_FLAGS": xla, "compiler_options": flag_set.compiler_options(), "env": env,
            "shell": f'{shell} XLA_FLAGS="{xla}"'.strip(), "jaxlib": jaxlib, "notes": notes,
            "caveats": [c.to_dict() for c in caveats.applying(offloads, pipelined, has_descriptor_bug(jaxlib))]}


def _spelled_for(flag_set: FlagSet, jaxlib: str) -> tuple[str, str, list[str]]:
    """(``XLA_FLAGS``, the jaxlib it is spelled for, notes) — see ``export``: the flags respelled or dropped for
    that jaxlib's flag table, and the #46231 workaround added or left out as that jaxlib needs it."""
    if not re.fullmatch(r"\d+\.\d+\.\d+(\.\d+)?", str(jaxlib)):
        raise ValueError(f"bad jaxlib version {jaxlib!r}: give it as MAJOR.MINOR.PATCH, e.g. {KNOWN_JAXLIB}")
    if jaxlib == INSTALLED_JAXLIB:
        return flag_set.xla_flags(), jaxlib, []
    flags, notes = for_jaxlib(flag_set.flags, jaxlib, what="spelled")
    passes = tuple(p for p in flags.get("xla_disable_hlo_passes", ()) if p != DESCRIPTOR_FIX_PASS)
    if has_descriptor_bug(jaxlib):  # as resolve() adds it on such a jaxlib
        passes += (DESCRIPTOR_FIX_PASS,)
        notes.append(f"jaxlib {jaxlib} has openxla/xla #46231: the offload_descriptors fix is exported")
    elif DESCRIPTOR_FIX_PASS in flags.get("xla_disable_hlo_passes", ()):
        notes.append(f"jaxlib {jaxlib} has the #46231 fix (openxla/xla #46308): the offload_descriptors fix is left out")
    if "xla_disable_hlo_passes" in flags:
        flags["xla_disable_hlo_passes"] = passes
    text = " ".join(f"--{name}={shlex.quote(format_value(value))}" for name, value in flags.items()
                    if name != JAX_OPTIMIZATION_LEVEL and (name != "xla_disable_hlo_passes" or value))
    return text, jaxlib, notes
