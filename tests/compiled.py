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
