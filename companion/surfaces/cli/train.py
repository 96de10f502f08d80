"""``train``: a few real training steps, one process or one of a ``jax.distributed`` job."""

from __future__ import annotations

import json


def _train(args) -> int:
    """Train a small model on this machine's devices, or as one process of a jax.distributed job
    (``distributed.Cluster.from_env``), with Orbax checkpoints to resume from."""
    import jax

    from ...ground import distributed
    from ...measuring import loop

    cluster = distributed.Cluster.from_env()  # a bad address or rank fails here, before JAX waits for peers
    config = loop.RunConfig(model=args.model, steps=args.steps, batch=args.batch, seq=args.seq, policy=args.policy,
                            seed=args.seed, checkpoint_dir=args.checkpoint_dir, save_every=args.save_every)
    if cluster is not None:
        cluster.initialize()
    result = loop.run(config)
    out = {"process_id": jax.process_index(), "num_processes": result.num_processes,
           "num_devices": result.num_devices, "resumed_from": result.resumed_from, "saved": list(result.saved),
           "losses": {str(k): v for k, v in result.losses.items()}}
    if args.json:
        print(json.dumps(out))
    else:
        for step, loss in result.losses.items():
            print(f"step {step}: loss {loss:.6f}")
        print(f"{result.num_processes} process(es), {result.num_devices} devices; resumed from "
              f"{result.resumed_from}; saved {list(result.saved)}")
    return 0
