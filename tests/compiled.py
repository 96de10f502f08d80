"""Compiles shared by several test modules (each is seconds of XLA time: do it once per run)."""

import functools

from companion import compiler, policies, targets, train

BIG = {"llama3.1-405b": ("h100:8x8", None), "deepseek-v3-671b": ("gb200:16x4", {"fsdp": 8, "expert": 8})}
TINY = dict(model="tiny-llama", target="h100:1x2", batch=16, seq=512)


@functools.cache
def big(model: str, policy: str):
    """A full-size model's train step on 64 GPUs, batch 64, sequence 4096."""
    target, mesh = BIG[model]
    placement = compiler.place(targets.target(target), mesh)
    return train.compile_step(train.trainer(model, policy), placement, batch=64, seq=4096)


@functools.cache
def small(policy: str):
    """Llama 3.1 8B's train step on 8 x H100, batch 8, sequence 4096 (real size, seconds to compile)."""
    placement = compiler.place(targets.target("h100", "1x8"))
    return train.compile_step(train.trainer("llama3.1-8b", policy), placement, batch=8, seq=4096)


@functools.cache
def tiny(policy: str):
    placement = compiler.place(targets.target(TINY["target"]))
    return train.compile_step(train.trainer(TINY["model"], policy), placement, TINY["batch"], TINY["seq"])


def tiny_all():
    return {p: tiny(p) for p in policies.PRESETS}


# jaxlib 0.12's XLA keeps the last scanned layer's forward values for the backward pass: it recomputes and reads
# back L - 1 layers, where 0.10.2's did L (tests/test_flops.py, tests/test_step_compile.py). The budget still
# models L; its accuracy targets where that moves the peak are missed on 0.12 (issue 50's closing note), held here
# as strict expected failures: each fails the suite the day it passes.
def budget_miss_on_0_12(why: str):
    import pytest

    from companion import flags

    return pytest.mark.xfail(flags.INSTALLED_JAXLIB == "0.12.0.1", strict=True,
                             reason=f"budget accuracy missed on jaxlib 0.12.0.1: {why}")
