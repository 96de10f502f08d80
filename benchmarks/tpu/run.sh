#!/usr/bin/env bash
# On the lent TPU v5e (device tool): install what the lab needs beside the machine's JAX, then run a part of
# bench_measured.py with its output under $OUT. Usage: benchmarks/tpu/run.sh ARGS... (passed to bench_measured.py)
set -uo pipefail
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
source "$(dirname "$0")/site.sh"
export PYTHONPATH=${PYTHONPATH:-}:$SITE
python3 -c "import jax, flax, optax, libtpu; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())" 2>&1 | tail -1
exec python3 benchmarks/bench_measured.py "$@"
