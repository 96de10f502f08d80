"""The tables of docs/what-changed-0.12.md: the reference steps' peak HBM, host bytes, simulated step time and
rankings on jaxlib 0.10.2 (the stored results at ``--before``, the commit before the move) and on the main lock
(the stored results of this checkout), the flag tables' changes, the planner's picks and notebook 07's answer.

    .venv/bin/python scripts/what_changed.py --before b4fc7dd   # rewrites the generated part of the page

Nothing is recomputed here: both sides are stored results (each with its stamp; the page prints both stamps'
versions), and notebook 05's stack is docs/data/reference-stack-jaxlib-*.json (scripts/reference_stack.py)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from companion import answer, bands, flags, tables  # noqa: E402

PAGE = ROOT / "docs" / "what-changed-0.12.md"
BEGIN, END = "<!-- begin: scripts/what_changed.py -->", "<!-- end: scripts/what_changed.py -->"
CONFIG = ("label", "model", "target", "mesh", "seq", "batch", "policy", "flags", "dispatch", "mem_fraction",
          "ragged_buffer_factor", "optimizer_offload", "space", "mesh_name")
GROUPS = {  # the reference steps: (title, which central rows)
    "notebook 04: Llama 3.1 8B on 8 H100 (PCIe Gen5)": lambda r: r["model"] == "llama3.1-8b" and r["target"] == "h100:1x8",
    "notebook 04: Llama 3.1 8B on 8 GB200 (NVLink-C2C, one Grace per two GPUs)":
        lambda r: r["model"] == "llama3.1-8b" and r["target"] == "gb200:2x4",
    "notebook 06: Llama 3.1 405B": lambda r: r["model"] == "llama3.1-405b",
    "notebook 07: DeepSeek-V3 671B": lambda r: r["model"] == "deepseek-v3-671b" and not r.get("space"),
}
GIB = 2**30


def _key(r: dict) -> str:
    return json.dumps([r.get(k) for k in CONFIG], sort_keys=True, default=str)


def _git_json(commit: str, path: str) -> dict:
    return json.loads(subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path}"], check=True,
                                     capture_output=True, text=True).stdout)


def _versions(result: dict) -> str:
    v = result.get("stamp", {}).get("versions", {})
    return ", ".join(f"{k} {v[k]}" for k in v)


def _pct(before: float, after: float) -> str:
    return f"{(after / before - 1) * 100:+.1f} %" if before else "-"


def _group_key(r: dict) -> tuple:
    return (r["target"], r["batch"], r["mem_fraction"], r.get("mesh_name"), r["dispatch"] or "")


def step_rows(before: list[dict], after: list[dict], keep) -> tuple[list[dict], list[dict]]:
    """Per reference step: peak, host bytes and step time on both; per pair (each step against the first of its
    target/batch/fraction in bench_central's order): the paired-band verdict on both."""
    old = {_key(r): r for r in before}
    out, ranks = [], []
    firsts: dict[tuple, dict] = {}
    for r in after:
        if not keep(r) or _key(r) not in old:
            continue
        o = old[_key(r)]
        out.append({"step": r["label"], "target": r["target"], "B": r["batch"],
                    "peak GiB (0.10.2 -> 0.12)": f"{o['device_peak_bytes'] / GIB:.1f} -> {r['device_peak_bytes'] / GIB:.1f}",
                    "host GiB": f"{o['host_bytes'] / GIB:.1f} -> {r['host_bytes'] / GIB:.1f}",
                    "fits": f"{'yes' if o['fits'] else 'no'} -> {'yes' if r['fits'] else 'no'}",
                    "step s": f"{o['step_seconds']:.3f} -> {r['step_seconds']:.3f}",
                    "change": _pct(o["step_seconds"], r["step_seconds"])})
        group = _group_key(r)
        if group not in firsts:
            firsts[group] = (r, o)
            continue
        base, base_old = firsts[group]
        if all("sweep" in x for x in (r, o, base, base_old)):
            was, now = bands.rank_records(o, base_old), bands.rank_records(r, base)
            ranks.append({"pair": f"{r['label']} vs {base['label']}", "target": r["target"], "B": r["batch"],
                          "0.10.2": was.short(), "0.12": now.short(),
                          "verdict": "same" if was.faster == now.faster else f"{was.faster or 'tie'} -> {now.faster or 'tie'}"})
    return out, ranks


def planner_rows(before: dict, after: dict) -> list[dict]:
    rows = []
    for o, r in zip(before["planner"], after["planner"]):
        pick = lambda p: p["plan"]["chosen"]["candidate"] if p.get("plan") and p["plan"].get("chosen") else None
        a, b = pick(o), pick(r)
        show = lambda c: (f"B {c['batch']}, {json.dumps(c['policy']) if not isinstance(c['policy'], str) else c['policy']}"
                          f"{', pipelined' if c['pipelined'] else ''}" if c else "none")
        rows.append({"model": r["model"], "target": r["target"], "0.10.2 pick": show(a), "0.12 pick": show(b),
                     "same": "yes" if a == b else "no"})
    return rows


def stack_rows() -> list[dict]:
    data = {p.name: json.loads(p.read_text()) for p in sorted((ROOT / "docs" / "data").glob("reference-stack-*.json"))}
    old = data.get("reference-stack-jaxlib-0.10.2.json")
    new = data.get(f"reference-stack-jaxlib-{flags.INSTALLED_JAXLIB}.json")
    if not (old and new):
        return []
    before = {r["label"]: r for r in old["rows"]}
    return [{"flag set": r["label"],
             "peak GiB": f"{before[r['label']]['device_peak_bytes'] / GIB:.2f} -> {r['device_peak_bytes'] / GIB:.2f}",
             "host GiB": f"{before[r['label']]['host_bytes'] / GIB:.2f} -> {r['host_bytes'] / GIB:.2f}",
             "D2H/H2D ops": f"{before[r['label']]['d2h_ops']}/{before[r['label']]['h2d_ops']} -> {r['d2h_ops']}/{r['h2d_ops']}",
             "step ms": f"{before[r['label']]['step_seconds'] * 1e3:.1f} -> {r['step_seconds'] * 1e3:.1f}",
             "change": _pct(before[r["label"]]["step_seconds"], r["step_seconds"])}
            for r in new["rows"] if r["label"] in before]


def _space_moves(before: list[dict], after: list[dict]) -> str:
    """What moved in the space: full remat's largest batch and the naive steps' worst exposed share."""
    def largest(rows, key):
        return max(r["batch"] for r in rows if r["label"] == "full remat" and r["fits"]
                   and (r["target"], r["mem_fraction"]) == key)

    def exposed(rows):
        worst = max((r for r in rows if r["label"].endswith("naive")),
                    key=lambda r: r["exposed_transfer_seconds"] / r["step_seconds"])
        return f"{worst['exposed_transfer_seconds'] / worst['step_seconds'] * 100:.1f} %"

    keys = sorted({(r["target"], r["mem_fraction"]) for r in after})
    batches = "; ".join(f"{t} at {f}: B {largest(before, (t, f))} -> {largest(after, (t, f))}" for t, f in keys)
    return (f"Full remat's largest batch: {batches}. The naive offload steps' largest exposed-transfer share: "
            f"{exposed(before)} -> {exposed(after)} (the +67.7 % over naive needs 40 %).")


def generate(before_commit: str) -> str:
    central_old = _git_json(before_commit, "benchmarks/results/central.json")
    central_new = json.loads((ROOT / "benchmarks/results/central.json").read_text())
    plan_old = _git_json(before_commit, "benchmarks/results/plan.json")
    plan_new = json.loads((ROOT / "benchmarks/results/plan.json").read_text())
    parts = [f"Generated by `scripts/what_changed.py --before {before_commit}`: 0.10.2 is `central.json` and "
             f"`plan.json` at {before_commit} ({_versions(central_old)}), 0.12 this checkout's "
             f"({_versions(central_new)}). Step times are the simulator's, with the paired band where two steps are "
             "ranked (`bands.rank_records`); absolute bands are in each notebook."]
    changed = flags.changes("0.10.2", flags.KNOWN_JAXLIB)
    parts.append(f"### XLA's flags\n\n{len(flags.TABLES['0.10.2'])} flags in jaxlib 0.10.2, "
                 f"{len(flags.TABLES[flags.KNOWN_JAXLIB])} in {flags.KNOWN_JAXLIB}: renamed "
                 + ", ".join(f"`{r.old}` -> `{r.new}` (since {r.since})" for r in changed.renamed)
                 + f"; removed ({len(changed.removed)}) " + ", ".join(f"`{n}`" for n in changed.removed)
                 + f"; added ({len(changed.added)}) " + ", ".join(f"`{n}`" for n in changed.added)
                 + "; retyped " + ", ".join(f"`{n}` {a} -> {b}" for n, (a, b) in changed.retyped.items()) + ".")
    stack = stack_rows()
    if stack:
        parts.append("### Notebook 05's stack (16 Llama 3.1 8B layers, B 8, S 4096, `minimal_offloaded`, 8 H100)\n\n"
                     + tables.markdown(stack))
    for title, keep in GROUPS.items():
        steps, ranks = step_rows(central_old["rows"], central_new["rows"], keep)
        parts.append(f"### {title}\n\n" + tables.markdown(steps)
                     + ("\n\nRankings (each step against the first of its target and batch):\n\n" + tables.markdown(ranks)
                        if ranks else ""))
    space_old = [r for r in central_old["rows"] if r.get("space")]
    space_new = json.loads((ROOT / "benchmarks/results/central_space.json").read_text())
    again = space_new["stamp"]["versions"] != central_old["stamp"]["versions"]
    parts.append("### Notebook 07's answer to the published +57 % (DeepSeek-V3, the published space)\n\n"
                 f"**0.10.2:**\n\n{answer.headline(space_old)}\n\n**0.12:**\n\n"
                 + (answer.headline(space_new["rows"]) + "\n\n" + _space_moves(space_old, space_new["rows"]) if again else
                    "not yet rerun: `central_space.json` is still 0.10.2's (78 DeepSeek-V3 compiles on 256 and 512 "
                    "GB200, about two hours on 2 cores: `benchmarks/bench_central.py --part central_space`)"))
    parts.append("### The planner's picks (`plan.json`)\n\n" + tables.markdown(planner_rows(plan_old, plan_new)))
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit whose stored results are jaxlib 0.10.2's")
    args = parser.parse_args()
    text = PAGE.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    PAGE.write_text(f"{head}{BEGIN}\n{generate(args.before)}\n{END}{tail}")
    print(f"wrote {PAGE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
