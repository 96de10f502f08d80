#!/usr/bin/env bash
# On the lent TPU v5e (device tool): the decision experiment (benchmarks/bench_decisions.py) beside the machine's
# JAX, its output under $OUT.
#   benchmarks/tpu/decisions.sh picks [JOBS]          # compile-only: every (shape, job) not yet under $DONE, JOBS at once
#   [PICKS="f ..."] [DONE_MEASURED="f ..."] [MEASURE_ARGS="--steps 3 --warmup 1"] benchmarks/tpu/decisions.sh measure KEY ...
#                                                    # on the chip: those shapes' runs, in turn
set -uo pipefail
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
source "$(dirname "$0")/site.sh"
export PYTHONPATH=$PWD:$PWD/benchmarks:${PYTHONPATH:-}:$SITE  # the machine's JAX comes on its PYTHONPATH
part=$1; shift
if [ "$part" = picks ]; then
  # compile-only against libtpu's v5e topology: no process opens the chip (JAX_PLATFORMS=cpu), so they run at once
  mkdir -p "$OUT/picks"
  python3 benchmarks/bench_decisions.py --part picks --list-jobs | while read -r key job; do
    tag="${key}_${job/:/-}"; [ -f "${DONE:-/nonexistent}/decision_picks-$tag.json" ] || echo "$key $job"
  done | xargs -P "${1:-12}" -L 1 sh -c 'JAX_PLATFORMS=cpu timeout ${JOB_TIMEOUT:-560} python3 benchmarks/bench_decisions.py --part picks --only "$0" --job "$1" --out "$OUT/picks" > "$OUT/picks/$0_${1#*:}.log" 2>&1; echo "$0 $1 rc=$?"'
else
  mkdir -p "$OUT/measure"
  # PICKS: the committed picks' files (default results/decision_picks.json); DONE: parts already measured
  for key in "$@"; do
    python3 benchmarks/bench_decisions.py --part measure --only "$key" --out "$OUT/measure" ${PICKS:+--picks $PICKS} \
      ${DONE_MEASURED:+--done $DONE_MEASURED} ${MEASURE_ARGS:-} 2>&1 | grep -v "^$" | tail -40
  done
fi
