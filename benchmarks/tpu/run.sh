#!/usr/bin/env bash
# On the lent TPU v5e (device tool): install what the lab needs beside the machine's JAX, then run a part of
# bench_measured.py with its output under $OUT. Usage: benchmarks/tpu/run.sh ARGS... (passed to bench_measured.py)
set -uo pipefail
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
SITE=${TPU_SITE:-/tmp/site}
if [ ! -f "$SITE/.ok" ]; then
  PIP="python3 -m pip install --isolated -q --only-binary=:all: --index-url file:///opt/pypi/simple --target $SITE"
  PIP_CONFIG_FILE=/dev/null $PIP flax==0.12.8 optax==0.2.8 pyyaml >/dev/null 2>&1 \
    || PIP_CONFIG_FILE=/dev/null $PIP flax optax pyyaml 2>&1 | tail -3
  touch "$SITE/.ok"
fi
export PYTHONPATH=${PYTHONPATH:-}:$SITE
python3 -c "import jax, flax, optax, libtpu; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())" 2>&1 | tail -1
exec python3 benchmarks/bench_measured.py "$@"
