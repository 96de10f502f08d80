"""Stamp a result written before ``companion.freshness`` (rule 2), where its history shows it still holds.

    .venv/bin/python scripts/restamp.py benchmarks/results/central.json [--commit C]

A result stamped under an older rule (or an older form of this one, ``--commit``) is stamped again the same way.
A result written under rule 1 carries the byte hash of the ``companion/`` that wrote it, or no stamp at all.
This finds the commit whose code wrote it — for a rule-1 stamp, the newest commit at or before the one that
committed the file whose ``companion/`` has that hash; for none, the commit that committed the file, where its
parent's code keys the same (so the commit's own changes moved nothing the result ran) — computes the rule-2
stamp of that commit's tree (in a process of its own: its tables are imported from it) and of this checkout's,
and writes this checkout's into the file only where the two are equal: the code, data files and table entries
that decided its numbers are this checkout's, so rerunning the benchmark would write the same numbers. Where
they differ it says what changed and writes nothing: rerun the benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from companion import freshness, results  # noqa: E402

# A result file -> the script that writes it (``bench_<name>.py`` but these).
PRODUCERS = {"measured_compile_only": "benchmarks/bench_measured.py"}
SEARCH = 40  # commits back from the file's own to look for the rule-1 stamp's source


def producer_of(path: Path) -> str:
    return PRODUCERS.get(path.stem, f"benchmarks/bench_{path.stem}.py")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def tree_source_hash(commit: str) -> str:
    """``results.source_hash`` of ``commit``'s ``companion/`` (rule 1's stamp), read from git."""
    paths = sorted(p for p in git("ls-tree", "-r", "--name-only", commit, "companion").splitlines() if p.endswith(".py"))
    return results.files_hash((Path(p).relative_to("companion").as_posix(),
                               subprocess.run(["git", "show", f"{commit}:{p}"], cwd=ROOT, check=True,
                                              capture_output=True).stdout) for p in paths)


def writing_commit(path: Path, stored: dict) -> tuple[str, str]:
    """The commit whose code wrote ``path``, and the evidence."""
    committed = git("log", "-1", "--format=%H", "--", str(path.relative_to(ROOT)))
    source = stored.get("companion_source")
    if source:
        for commit in git("rev-list", f"--max-count={SEARCH}", committed).splitlines():
            if tree_source_hash(commit) == source:
                return commit, f"rule-1 stamp {source} is the companion/ of {commit[:12]}"
        raise SystemExit(f"{path.name}: no commit within {SEARCH} of {committed[:12]} has companion/ {source}")
    return committed, f"no rule-1 stamp: the commit that committed it, {committed[:12]}, its parent's code keying the same"


def stamp_at(commit: str | None, producer: str, result: dict, installed: dict) -> dict:
    """The rule-2 stamp of ``result`` as ``commit``'s tree (None: this checkout) would write it."""
    code = ("import json, sys; from companion import freshness; "
            "print(json.dumps(freshness.stamp(sys.argv[1], json.load(open(sys.argv[2])), installed=json.loads(sys.argv[3]))))")
    with tempfile.TemporaryDirectory() as tmp:
        where = ROOT
        if commit is not None:
            where = Path(tmp) / "tree"
            where.mkdir()
            archive = subprocess.run(["git", "archive", commit, "companion", "benchmarks"], cwd=ROOT, check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
            shutil.copy(ROOT / "companion" / "freshness.py", where / "companion" / "freshness.py")  # rule 2's reader
        payload = Path(tmp) / "result.json"
        payload.write_text(json.dumps(result))
        env = {**os.environ, "PYTHONPATH": str(where)}
        out = subprocess.run([sys.executable, "-c", code, producer, str(payload), json.dumps(installed)], cwd=where,
                             env=env, capture_output=True, text=True)
    if out.returncode:
        raise ValueError(f"{commit or 'this checkout'} cannot stamp it: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--commit", help="the commit whose code wrote it (default: found from git, above)")
    parser.add_argument("--evidence", default="given", help="with --commit: why that commit's code wrote it")
    args = parser.parse_args()
    for path in args.results:
        path = path.resolve()
        data = json.loads(path.read_text())
        stored = data.get("stamp") or {}
        if stored.get("rule") == freshness.RULE and not args.commit:
            print(f"{path.name}: already stamped under rule {freshness.RULE} (name the commit that wrote it to "
                  "stamp it again under the rule as it is now)")
            continue
        producer = producer_of(path)
        commit, evidence = (args.commit, args.evidence) if args.commit else writing_commit(path, stored)
        machine = data["machine"]
        installed = {"jax": machine["jax"], "jaxlib": machine["jaxlib"]}
        named = freshness.coordinates(data, producer)
        if set(named["accelerator"]) & {"tpu-v5e"}:
            installed["libtpu"] = data.get("libtpu") or data.get("environment", {}).get("libtpu")
        try:
            checks = [("its commit", stamp_at(commit, producer, data, installed))]
            if not stored.get("companion_source") and not args.commit:
                checks.append(("its commit's parent", stamp_at(f"{commit}^", producer, data, installed)))
        except ValueError as err:
            print(f"{path.name}: NOT restamped — {err}; rerun {producer}")
            continue
        now = stamp_at(None, producer, data, installed)
        differs = [f"{name}: {', '.join(k for k in ('code', 'data', 'tables') if s[k] != now[k])}"
                   for name, s in checks if any(s[k] != now[k] for k in ("code", "data", "tables"))]
        if differs:
            print(f"{path.name}: NOT restamped — this checkout differs from {'; '.join(differs)} "
                  f"(written at {commit[:12]}: {evidence}); rerun {producer}")
            continue
        data["stamp"] = {**now, "restamped": {"from_rule": stored.get("rule", 1), "commit": commit,
                                              "evidence": evidence}}
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{path.name}: restamped (code {now['code']}, written at {commit[:12]}: {evidence})")


if __name__ == "__main__":
    main()
