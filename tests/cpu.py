"""The numerics tests' CPU compiles: ``jax.jit`` with LLVM at optimisation level 0.

These tests check math (gradients under every policy, three MoE paths, flash against dot-product
attention), which XLA's HLO passes decide; LLVM's optimisation level only decides how fast the CPU
code runs, and these steps run once on a few rows. Level 0 halves their compile: tiny-deepseek's
gradient 7.4 -> 3.6 s; the policy, MoE-path, flash and accumulation tests 155 -> 85 s; the 2-process
train test (``--xla_backend_optimization_level=0`` in its processes' ``XLA_FLAGS``) 89 -> 55 s
(each run alone on the 2-core CI machine).
"""

import jax

QUICK_CODEGEN = {"xla_backend_optimization_level": 0}


def jit(fn, **kwargs):
    """``jax.jit(fn)`` compiled with ``QUICK_CODEGEN``."""
    return jax.jit(fn, compiler_options=QUICK_CODEGEN, **kwargs)
