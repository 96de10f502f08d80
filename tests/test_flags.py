import os
from pathlib import Path
import subprocess
import sys

import jax
import jax.numpy as jnp
import jaxlib
import pytest

from companion import compiler, flags, targets

MISSPELT = "--xla_gpu_enable_latency_hidng_scheduler=true"


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_misspelt_flag_names_the_right_one():
    with pytest.raises(ValueError, match="did you mean xla_gpu_enable_latency_hiding_scheduler"):
        flags.parse(MISSPELT)


@pytest.mark.parametrize("text, message", [
    ("--xla_gpu_enable_latency_hiding_scheduler=maybe", "expected true or false"),
    ("--xla_gpu_enable_latency_hiding_scheduler=yes", "expected true or false"),  # XLA would abort on it
    ("--xla_gpu_graph_min_graph_size=1_000", "expected an integer"),
    ("--xla_gpu_memory_limit_slop_factor=lots", "expected an integer"),
    ("--xla_gpu_enable_while_loop_unrolling=SOMETIMES", "WHILE_LOOP_UNROLLING_AUTO_UNROLL"),
    ("--xla_gpu_enable_command_buffer=FUSION,GRAPHS", "'GRAPHS' is not one of"),
    ("--xla_gpu_enable_command_buffer=FUSION,-CUBLAS", "not both"),
    ("xla_gpu_enable_latency_hiding_scheduler=true", "each flag is written --name=value"),
])
def test_bad_values_name_the_flag_and_the_choices(text, message):
    with pytest.raises(ValueError, match=message):
        flags.parse(text)


def test_parse_forms_and_round_trip():
    parsed = flags.parse("--xla_gpu_enable_latency_hiding_scheduler --xla_gpu_memory_limit_slop_factor=90 "
                         "--xla_gpu_enable_command_buffer='' --xla_disable_hlo_passes=rematerialization,foo")
    assert parsed == {"xla_gpu_enable_latency_hiding_scheduler": True, "xla_gpu_memory_limit_slop_factor": 90,
                      "xla_gpu_enable_command_buffer": (), "xla_disable_hlo_passes": ("rematerialization", "foo")}
    assert flags.parse(flags.to_xla_flags(parsed)) == parsed
    assert flags.parse({"--xla_gpu_enable_pipelined_host_offloading": "true"}) == {
        "xla_gpu_enable_pipelined_host_offloading": True}


def test_flags_outside_the_catalog_but_known_to_xla_pass_with_a_type_check():
    assert "xla_gpu_enable_nccl_user_buffers" not in flags.CATALOG
    assert flags.parse("--xla_gpu_enable_nccl_user_buffers=true") == {"xla_gpu_enable_nccl_user_buffers": True}
    with pytest.raises(ValueError, match="expected true or false"):
        flags.parse("--xla_gpu_enable_nccl_user_buffers=please")


def test_known_names_were_generated_for_the_installed_jaxlib():
    assert flags.KNOWN_JAXLIB == flags.INSTALLED_JAXLIB == jaxlib.__version__
    assert set(flags.CATALOG) <= set(flags.KNOWN)
    for name, spec in flags.CATALOG.items():
        assert spec.kind in flags.KINDS and spec.topic in flags.TOPICS, name


def test_empty_list_items_are_dropped_and_only_enum_lists_take_edits():
    options = flags.to_compiler_options(flags.parse({"xla_disable_hlo_passes": ["", "rematerialization"]}))
    assert options["xla_disable_hlo_passes"] == "rematerialization"
    assert flags.to_compiler_options(flags.parse({"xla_disable_hlo_passes": ["-x"]}))["xla_disable_hlo_passes"] == "-x"


def test_command_buffer_edits_resolve_against_the_default():
    options = flags.to_compiler_options(flags.parse("--xla_gpu_enable_command_buffer=-CUBLAS,+WHILE"))
    chosen = options["xla_gpu_enable_command_buffer"].split(",")
    assert "CUBLAS" not in chosen and "WHILE" in chosen and "FUSION" in chosen


def test_xla_itself_accepts_every_catalog_default():
    """All taught flags at their catalog defaults, in one real compile-only GPU compile."""
    placement = compiler.place(targets.target("h100", "1"), backend_kind="cuda")
    x = placement.abstract((8, 8), jnp.float32)
    defaults = {k: v for k, v in flags.defaults().items() if k != "xla_dump_to"}
    report = compiler.compile(lambda a: a @ a, x, placement=placement, flags=flags.resolve(defaults, preset="none"))
    assert report.flags["xla_gpu_memory_limit_slop_factor"] == 95
    assert report.device.output_bytes == 8 * 8 * 4


def test_the_maxtext_gpu_preset_is_the_default_and_xla_accepts_it():
    placement = compiler.place(targets.target("h100", "1"), backend_kind="cuda")
    x = placement.abstract((8, 8), jnp.float32)
    report = compiler.compile(lambda a: a @ a, x, placement=placement)
    preset = flags.preset("maxtext_gpu")
    assert report.flag_set.preset == "maxtext_gpu"
    for name, value in preset.items():
        if name != "xla_disable_hlo_passes":
            assert report.flags[name] == value, name
    # MaxText's GPU recipes: the scheduler on, XLA's own remat off, double buffering on, CUDA graphs off
    assert report.flags["xla_gpu_enable_latency_hiding_scheduler"] is True
    assert "rematerialization" in report.flags["xla_disable_hlo_passes"]
    assert report.flags["xla_gpu_enable_while_loop_double_buffering"] is True
    assert report.flags["xla_gpu_enable_command_buffer"] == ()
    assert "maxtext_gpu" in report.summary() and report.to_dict()["flag_set"]["preset"] == "maxtext_gpu"


def test_resolve_presets_overrides_and_workarounds():
    default = flags.resolve()
    assert not flags.has_descriptor_bug(flags.INSTALLED_JAXLIB)  # the main lock's jaxlib has the #46231 fix
    assert default.preset == "maxtext_gpu" and default.workarounds == () and default.notes == ()
    assert default.flags["xla_disable_hlo_passes"] == ("rematerialization",)
    on_top = flags.resolve("--xla_gpu_enable_pipelined_host_offloading=true")
    assert on_top.preset == "maxtext_gpu" and on_top.flags["xla_gpu_enable_pipelined_host_offloading"] is True
    assert on_top.overrides == {"xla_gpu_enable_pipelined_host_offloading": True}
    bare = flags.resolve("none", workarounds=False)
    assert bare.flags == {} and bare.workarounds == ()
    explicit = flags.resolve("none --xla_gpu_enable_latency_hiding_scheduler=true", workarounds=False)
    assert explicit.flags == {"xla_gpu_enable_latency_hiding_scheduler": True}
    assert flags.resolve({"xla_gpu_memory_limit_slop_factor": 80}, preset="none").flags[
        "xla_gpu_memory_limit_slop_factor"] == 80
    assert flags.parse(default.xla_flags()) == default.flags  # the XLA_FLAGS string round-trips
    with pytest.raises(ValueError, match="unknown XLA flag preset 'maxtex'.*maxtext_gpu, none"):
        flags.resolve("maxtex")


@pytest.mark.parametrize("name", sorted(flags.ABSENT))
def test_flags_absent_from_every_supported_jaxlib_are_refused_with_what_to_write(name):
    assert all(name not in table for table in flags.TABLES.values())
    with pytest.raises(ValueError, match=f"'{name}' does not exist in jaxlib") as err:
        flags.parse(f"--{name}=1")
    assert "would abort the process" in str(err.value)


def test_maxtext_mains_flags_pass_and_the_booleans_xla_removed_are_named_at_once_with_the_string_to_paste():
    """MaxText's 1vm.sh flags (src/maxtext/configs/gpu/a3/llama_2_7b/1vm.sh at e591f30: the enum spellings) pass
    on jaxlib 0.12; the same flags in the boolean spelling of MaxText before 834e861b (2026-08-06) are refused
    with the enum spelling to paste (XLA_FLAGS would still take them as deprecated aliases; compile options not)."""
    text = (Path(__file__).parent / "data/maxtext/configs/gpu/a3/llama_2_7b/1vm.sh").read_text()
    xla_flags = text.split('export XLA_FLAGS="', 1)[1].split('"', 1)[0].replace("$OUTPUT_PATH/$RUN_NAME", "/tmp/run")
    assert flags.parse(xla_flags)["xla_gpu_pipeline_all_gather"] == "ON"
    old = xla_flags
    for op in ("all_gather", "reduce_scatter", "all_reduce"):
        old = old.replace(f"--xla_gpu_pipeline_{op}=on", f"--xla_gpu_enable_pipelined_{op}=true")
    with pytest.raises(ValueError) as err:
        flags.parse(old)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"3 XLA flags jaxlib {flags.KNOWN_JAXLIB} rejects")
    for op in ("all_gather", "reduce_scatter", "all_reduce"):
        assert f"'xla_gpu_enable_pipelined_{op}' is --xla_gpu_pipeline_{op} in jaxlib" in message
        assert f"--xla_gpu_pipeline_{op}=on" in message
    corrected = message.split("ready to paste: XLA_FLAGS=", 1)[1].strip('"')
    parsed = flags.parse(corrected)  # the corrected string passes, and keeps every other flag as written
    assert parsed["xla_gpu_pipeline_all_gather"] == "ON" and parsed["xla_gpu_enable_command_buffer"] == ()
    assert parsed["xla_gpu_all_reduce_combine_threshold_bytes"] == 134217728
    resolved = flags.resolve(flags.from_environment({"XLA_FLAGS": corrected}))
    assert resolved.preset == "none" and "xla_dump_to" not in resolved.flags
    assert resolved.notes and "xla_dump_to" in resolved.notes[0] and "a folder of their own" in resolved.notes[0]


def test_the_flag_tables_changes_from_0_10_2_to_0_12_name_renames_removals_and_additions():
    changed = flags.changes("0.10.2", "0.12.0.1")
    assert {(r.old, r.new) for r in changed.renamed} == {
        (f"xla_gpu_enable_pipelined_{op}", f"xla_gpu_pipeline_{op}") for op in ("all_gather", "reduce_scatter",
                                                                                "all_reduce")}
    assert "xla_gpu_enable_pipelined_collectives" in changed.removed and "xla_gpu_pipeline_all_gather" not in changed.added
    assert "xla_gpu_experimental_enable_dynamic_slice_table_offsets" in changed.added
    assert changed.retyped == {"xla_early_exit_with_layouts": ("string", "bool")}
    assert len(flags.TABLES["0.12.0.1"]) == 349 and len(changed.removed) == 13 and len(changed.added) == 51
    with pytest.raises(ValueError, match="no flag table for jaxlib '0.11.0'.*0.10.2, 0.12.0.1"):
        flags.changes("0.11.0", "0.12.0.1")


def test_a_preset_flag_a_jaxlib_lacks_is_respelled_or_dropped_in_one_line():
    preset = flags.preset("maxtext_gpu")
    old, notes = flags.for_jaxlib(preset, "0.10.2", what="preset maxtext_gpu")
    assert old["xla_gpu_enable_pipelined_all_gather"] is True and "xla_gpu_pipeline_all_gather" not in old
    (note,) = notes
    assert note.startswith("preset maxtext_gpu on jaxlib 0.10.2: respelled --xla_gpu_pipeline_all_gather=on as "
                           "--xla_gpu_enable_pipelined_all_gather=true")
    same, none = flags.for_jaxlib(preset, "0.12.0.1")
    assert same == preset and none == []
    # a flag a jaxlib's XLA lacks, with no rename: dropped, and said; a newer jaxlib is checked by the newest table
    kept, (line,) = flags.for_jaxlib({"xla_gpu_experimental_enable_dynamic_slice_table_offsets": True,
                                      "xla_gpu_enable_latency_hiding_scheduler": True}, "0.10.2")
    assert kept == {"xla_gpu_enable_latency_hiding_scheduler": True} and "dropped --xla_gpu_experimental_enable" in line
    assert "the newest below it" in flags.for_jaxlib({"xla_gpu_graph_level": 1}, "0.12.1")[1][0]
    with pytest.raises(ValueError, match="older than the lab's flag tables"):
        flags.for_jaxlib(preset, "0.9.0")
    with pytest.raises(ValueError, match="explicit has no spelling before jaxlib 0.12.0.1"):
        flags.for_jaxlib({"xla_gpu_pipeline_all_gather": "EXPLICIT"}, "0.10.2")


def test_the_46231_workaround_follows_the_jaxlib_that_has_the_bug():
    assert flags.has_descriptor_bug("0.10.2") and not flags.has_descriptor_bug("0.12.0.1")
    assert flags.has_descriptor_bug("0.11.2") and not flags.has_descriptor_bug("0.12.1")  # unlisted: by the first right
    offloading = flags.resolve()
    exported = flags.export(offloading, for_jaxlib="0.10.2", offloads=True)
    assert "dynamic-slice-annotator" in exported["XLA_FLAGS"] and "--xla_gpu_enable_pipelined_all_gather=true" in \
        exported["XLA_FLAGS"] and any("#46231" in n for n in exported["notes"])
    assert "dynamic-slice-annotator" not in flags.export(offloading)["XLA_FLAGS"]


def test_catalog_meanings_true_to_the_xla_they_describe():
    lhs = flags.flag("xla_gpu_enable_latency_hiding_scheduler").meaning
    assert all(w in lhs for w in ("O1", "PGLE", "speed-of-light")) and "generation" not in lhs
    assert "FULL_UNROLL" in flags.flag("xla_gpu_enable_while_loop_double_buffering").meaning
    for name in ("all_gather", "reduce_scatter", "all_reduce"):
        assert "O1+" in flags.flag(f"xla_gpu_pipeline_{name}").meaning
    assert "Flag-only in jaxlib 0.10.2" in flags.flag("xla_gpu_enable_pipelined_host_offloading").meaning
    for name in ("xla_gpu_experimental_parallel_async_compute_limit", "xla_dump_latency_hiding_schedule",
                 "xla_gpu_enable_analytical_latency_estimator", "xla_gpu_enable_analytical_sol_latency_estimator"):
        assert name in flags.CATALOG
    assert flags.flag("xla_gpu_experimental_parallel_async_compute_limit").default == 2


def test_bad_value_xla_rejects_is_a_value_error_not_an_abort():
    placement = compiler.place(targets.target("h100", "1"), backend_kind="cuda")
    x = placement.abstract((8,), jnp.float32)
    # A valid name and a value our type check lets through, but XLA refuses: an error, the process lives.
    with pytest.raises(ValueError, match="XLA refused"):
        compiler.compile(lambda a: a + 1, x, placement=placement,
                         flags={"xla_gpu_experimental_autotune_cache_mode": "NOT_A_MODE"})
    assert float(jax.jit(lambda a: a + 1)(jnp.ones(()))) == 2.0


def test_bad_xla_flags_env_is_caught_before_xla_aborts():
    code = ("import companion\nfrom companion import compiler\n"
            "try:\n    compiler.backend()\nexcept ValueError as e:\n    print('caught:', e)\n")
    out = run_python(code, XLA_FLAGS=MISSPELT)
    assert out.returncode == 0, out.stderr
    assert "caught: unknown XLA flag" in out.stdout
    assert "xla_gpu_enable_latency_hiding_scheduler" in out.stdout
    assert "would abort the process" in out.stderr  # the import-time warning


def test_changing_xla_flags_after_start_warns(monkeypatch):
    compiler.backend()
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_latency_hiding_scheduler=true")
    with pytest.warns(UserWarning, match="XLA_FLAGS changed after the backend started"):
        compiler.warn_if_xla_flags_changed()


def test_cli_flags_check():
    bad = subprocess.run([sys.executable, "-m", "companion", "flags", "--check", MISSPELT],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "xla_gpu_enable_latency_hiding_scheduler" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    good = subprocess.run([sys.executable, "-m", "companion", "flags", "--check",
                           "--xla_gpu_enable_latency_hiding_scheduler=true"], capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
