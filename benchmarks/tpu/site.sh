# Sourced by run.sh and decisions.sh on the lent TPU v5e: flax, optax and pyyaml installed once into $SITE beside the
# machine's own JAX. A --target install drags in its own jax, jaxlib and numpy; they are removed, or the chip's JAX
# would be shadowed and fall back to CPU.
SITE=${TPU_SITE:-/tmp/site}
if [ ! -f "$SITE/.ok" ]; then
  PIP="python3 -m pip install --isolated -q --only-binary=:all: --index-url file:///opt/pypi/simple --target $SITE"
  PIP_CONFIG_FILE=/dev/null $PIP flax==0.12.8 optax==0.2.8 pyyaml >/dev/null 2>&1 \
    || PIP_CONFIG_FILE=/dev/null $PIP flax optax pyyaml 2>&1 | tail -3
  rm -rf "$SITE"/jax "$SITE"/jaxlib "$SITE"/numpy "$SITE"/jax-* "$SITE"/jaxlib-* "$SITE"/numpy-*  # the machine's own
  touch "$SITE/.ok"
fi
