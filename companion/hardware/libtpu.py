"""libtpu, XLA:TPU's compiler and runtime, as the lab compiles with it.

* **Compile-only.** With the ``libtpu`` wheel installed (jax's ``tpu`` extra pins it: 0.0.50.1 on the main
  lock, 0.0.42.1 on the chip lock, the lent v5e's; ``make`` installs it on Linux x86-64), ``topology(tpu)`` is a TPU device to compile for on
  a machine without one (``jax.experimental.topologies.get_topology_desc``): XLA:TPU's own passes,
  memory-space assignment (``S(1)`` is the cores' VMEM, ``S(5)`` pinned host memory) and buffer
  assignment run on the CPU. ``installed()`` says whether it is there.
* **Flags.** libtpu reads ``LIBTPU_INIT_ARGS`` once, when the TPU backend starts; per compile the same
  flags pass as ``compiler_options``, where libtpu 0.0.42.1 answers an unknown name with
  ``INVALID_ARGUMENT: No such compile option`` (checked). The lab validates both against ``KNOWN``
  (every flag name ``libtpu.so`` accepts, with its type: ``data/libtpu_flags.json``, written by
  ``scripts/refresh_libtpu_flag_names.py``) before libtpu sees them. Presets: ``libtpu_defaults``
  (none set) and ``maxtext_host_offload``, MaxText's ``HOST_OFFLOAD_FLAGS``
  (``benchmarks/xla_flags_library.py``), which MaxText's TPU recipes add when they offload.
  GPU flags (``xla_gpu_*``) and the lab's GPU workaround never reach a TPU compile.
* **Out of memory is a compile-time verdict.** XLA:TPU refuses a program whose buffers exceed the
  chip's HBM (``RESOURCE_EXHAUSTED: Ran out of memory ...``) rather than compiling it, unlike XLA:GPU;
  ``out_of_memory(message)`` reads the bytes it needed and had from that message.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import re
from pathlib import Path
from typing import Any, Mapping

from . import flags as xla_flags
from ..ground import stderr
from . import targets

INIT_ARGS_ENV = "LIBTPU_INIT_ARGS"
PINNED = "0.0.42.1"  # jax 0.10.2's `tpu` extra: the chip lock's, what the lent v5e runs (KNOWN is its flag table)

_DATA = Path(__file__).with_name("data") / "libtpu_flags.json"
_KNOWN_DATA = json.loads(_DATA.read_text())
KNOWN_LIBTPU: str = _KNOWN_DATA["libtpu"]
KNOWN: dict[str, str] = dict(_KNOWN_DATA["flags"])  # name -> bool | tristate | int | float | string | enum | aborts
TRISTATE = ("ENABLED", "DISABLED")  # a tri-state flag's values beside true/false (MaxText writes ENABLED)

# MaxText's HOST_OFFLOAD_FLAGS (benchmarks/xla_flags_library.py, snapshot of 2026-11): "optimizations
# recommended when using host offloading", added by MaxText's TPU recipes that offload activations.
MAXTEXT_HOST_OFFLOAD: dict[str, Any] = {
    "xla_tpu_enable_all_experimental_scheduler_features": True,
    "xla_tpu_enable_scheduler_memory_pressure_tracking": True,
    "xla_tpu_host_transfer_overlap_limit": 24,
    "xla_tpu_aggressive_opt_barrier_removal": "ENABLED",
    "xla_lhs_prioritize_async_depth_over_stall": "ENABLED",
    "xla_tpu_enable_ag_backward_pipelining": True,
    "xla_should_allow_loop_variant_parameter_in_chain": "ENABLED",
    "xla_should_add_loop_invariant_op_in_chain": "ENABLED",
    "xla_max_concurrent_host_send_recv": 100,
    "xla_tpu_scheduler_percent_shared_memory_limit": 100,
    "xla_latency_hiding_scheduler_rerun": 2,
}
PRESETS: dict[str, dict[str, Any]] = {"libtpu_defaults": {}, "maxtext_host_offload": MAXTEXT_HOST_OFFLOAD}
DEFAULT_PRESET = "libtpu_defaults"


def installed() -> bool:
    """The ``libtpu`` wheel is importable (compile-only TPU targets work)."""
    return importlib.util.find_spec("libtpu") is not None


def version() -> str | None:
    """The installed libtpu's version, or None."""
    try:
        from importlib.metadata import version as dist_version

        return dist_version("libtpu")
    except Exception:  # not installed as a distribution
        return None


# libtpu takes a machine-wide lock file (/tmp/libtpu_lockfile) when its plugin starts, also to compile only: a
# second process (a test worker, a notebook kernel) would fail "Internal error when accessing libtpu multi-process
# lockfile". With no chip behind a compile-only topology there is nothing to share, so the lock is waived there.
_NO_LOCK = "ALLOW_MULTIPLE_LIBTPU_LOAD"


@functools.cache
def topology(tpu: targets.Tpu):
    """libtpu's compile-only topology of one ``tpu`` chip (its devices are what a step is compiled for)."""
    if not installed():
        raise ValueError(f"compiling for {tpu.key} without a TPU needs libtpu: pip install 'jax[tpu]' (libtpu at "
                         "your jax's pin; make installs it on Linux x86-64)")
    import os

    from jax.experimental import topologies

    os.environ.setdefault(_NO_LOCK, "1")
    try:
        with stderr.capture():
            return topologies.get_topology_desc(platform="tpu", topology_name=tpu.topology_name,
                                                chip_config_name=tpu.chip_config_name, chips_per_host_bounds=(1, 1, 1),
                                                num_slices=1)
    except Exception as err:  # noqa: BLE001 - libtpu's refusals are runtime errors: one line
        raise ValueError(f"libtpu could not make a compile-only {tpu.topology_name} topology: "
                         f"{str(err).splitlines()[0]}") from None


# ----------------------------------------------------------------------------- flags


def _unknown(name: str) -> ValueError:
    close = difflib.get_close_matches(name, list(KNOWN), n=3, cutoff=0.75)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return ValueError(f"unknown libtpu flag {name!r}{hint} ({len(KNOWN)} names are known to libtpu {KNOWN_LIBTPU})")


def _convert(name: str, raw: Any) -> Any:
    kind = KNOWN[name]
    bad = f"bad value {raw!r} for libtpu flag {name!r}"
    if kind == "aborts":
        raise ValueError(f"libtpu flag {name!r} aborts libtpu {KNOWN_LIBTPU} when set (found by "
                         "scripts/refresh_libtpu_flag_names.py): leave it out")
    text = str(raw).strip()
    if kind == "tristate" and text.upper() in TRISTATE:
        return text.upper()
    if kind in ("bool", "tristate"):
        if isinstance(raw, bool):
            return raw
        if text.lower() in ("true", "1", "false", "0"):
            return text.lower() in ("true", "1")
        raise ValueError(f"{bad}: expected true or false" + (f", or one of {', '.join(TRISTATE)}" if kind == "tristate"
                                                              else ""))
    if kind == "int":
        if isinstance(raw, bool) or not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError(f"{bad}: expected an integer")
        return int(text)
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{bad}: expected a number") from None
    return text


def parse(flags: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate a ``LIBTPU_INIT_ARGS`` string or a ``{name: value}`` dict; return ``{name: value}``
    (every bad flag named at once)."""
    if not flags:
        return {}
    parsed, problems = {}, []
    for name, value in xla_flags.flag_items(flags, INIT_ARGS_ENV):
        try:
            if name not in KNOWN:
                raise _unknown(name)
            parsed[name] = _convert(name, value)
        except ValueError as err:
            problems.append(str(err))
    if problems:
        raise ValueError(problems[0] if len(problems) == 1 else " | ".join(problems))
    return parsed


def resolve(spec: "str | Mapping[str, Any] | xla_flags.FlagSet | None" = None) -> xla_flags.FlagSet:
    """The libtpu flags of one compile: ``None`` (libtpu's defaults), a preset name optionally followed
    by flags (``"maxtext_host_offload --xla_tpu_host_transfer_overlap_limit=8"``), or flags alone."""
    if isinstance(spec, xla_flags.FlagSet):
        if spec.platform != "tpu":
            raise ValueError(f"flag set {spec.describe()!r} is for XLA:GPU; a TPU compile takes libtpu flags: "
                             f"{', '.join(PRESETS)} or --name=value")
        return spec
    name, overrides = DEFAULT_PRESET, {}
    if isinstance(spec, Mapping):
        overrides = parse(spec)
    elif spec:
        named, text = xla_flags.split_preset(spec, PRESETS, "libtpu flag")
        name = named or name
        overrides = parse(text)
    return xla_flags.FlagSet(name, {**PRESETS[name], **overrides}, overrides, platform="tpu")


def check_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """``LIBTPU_INIT_ARGS`` of this environment, validated (libtpu would refuse the backend's start)."""
    return parse(environ.get(INIT_ARGS_ENV, ""))


def export(flag_set: xla_flags.FlagSet, *, offloads: bool = False) -> dict[str, Any]:
    """A libtpu flag set as a user pastes it: ``LIBTPU_INIT_ARGS`` (the same as per-compile ``compiler_options``),
    the environment (that alone: a TPU has no allocator fraction or pinned pool to size, its compile places every
    buffer), the libtpu the flags were checked against and the caveats of a step that offloads (the A/B check; the
    GPU's memcpy-descriptor bug and pipelined-offload flag do not apply)."""
    from ..ground import caveats

    flag_set = resolve(flag_set)
    args = flag_set.xla_flags()
    return {INIT_ARGS_ENV: args, "compiler_options": flag_set.compiler_options(),
            "env": {INIT_ARGS_ENV: args} if args else {}, "shell": f'{INIT_ARGS_ENV}="{args}"' if args else "",
            "libtpu": version() or KNOWN_LIBTPU, "notes": [f"flags checked against libtpu {KNOWN_LIBTPU}'s names"],
            "caveats": [c.to_dict() for c in caveats.applying(offloads, False, descriptor_bug=False)]}


# ----------------------------------------------------------------------------- out of memory

_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_NEEDED = (
    # "the total memory required for HLO temporaries (96.00G) exceeds available HBM (15.75G)"
    re.compile(r"required for HLO temporaries \(([\d.]+)([KMGT]?)\) exceeds available HBM \(([\d.]+)([KMGT]?)\)"),
    # "Ran out of memory in memory space hbm. Used 21.75G of 15.75G hbm."
    re.compile(r"Used ([\d.]+)([KMGT]?) of ([\d.]+)([KMGT]?) hbm"),
)


def out_of_memory(message: str) -> tuple[int, int] | None:
    """(bytes needed, bytes available) from XLA:TPU's compile-time ``RESOURCE_EXHAUSTED`` message (to its
    two decimals of a GiB), or None when the message is not one."""
    if "RESOURCE_EXHAUSTED" not in message and "Ran out of memory" not in message:
        return None
    for pattern in _NEEDED:
        found = pattern.search(message)
        if found:
            need, need_unit, have, have_unit = found.groups()
            return int(float(need) * _UNIT[need_unit]), int(float(have) * _UNIT[have_unit])
    return None
