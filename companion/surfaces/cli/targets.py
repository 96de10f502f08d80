"""``targets``: the accelerator catalog, host links and usable HBM."""

from __future__ import annotations

import json

from ...hardware import targets


def _targets(args) -> int:
    fraction = targets.check_mem_fraction(args.mem_fraction)
    rows = [g.to_dict() | {"default_topology": targets.DEFAULT_TOPOLOGY[g.key], "mem_fraction": fraction,
                           "usable_hbm_bytes": targets.allocator_limit_bytes(g.hbm_bytes, fraction),
                           "host_link_detail": g.host_link.to_dict()} for g in targets.GPUS.values()]
    if args.json:
        print(json.dumps({"gpus": rows, "tpus": [t.to_dict() for t in targets.TPUS.values()],
                          "host_links": {k: link.to_dict() for k, link in targets.HOST_LINKS.items()}}, indent=1))
        return 0
    print(f"{'gpu':6} {'name':32} {'HBM GiB':>8} {'usable':>7} {'HBM TB/s':>8} {'bf16 TF/s':>9} {'SMs':>4}  {'cc':5} "
          f"{'host link':28} {'GB/s/dir per GPU':>16}  topology")
    for g in targets.GPUS.values():
        link = g.host_link
        per_gpu = f"{link.bandwidth_per_gpu('d2h') / 1e9:.0f}/{link.bandwidth_per_gpu('h2d') / 1e9:.0f}"
        print(f"{g.key:6} {g.name:32} {g.hbm_bytes / targets.GiB:8.1f} "
              f"{targets.allocator_limit_bytes(g.hbm_bytes, fraction) / targets.GiB:7.1f} {g.hbm_bandwidth / 1e12:8.2f} "
              f"{g.bf16_dense_flops / 1e12:9.0f} {g.sm_count:4}  {g.cc:5} {link.name:28} {per_gpu:>16}  "
              f"{targets.DEFAULT_TOPOLOGY[g.key]}")
    for t in targets.TPUS.values():
        link = t.host_link
        print(f"{t.key:6} {t.name:32} {t.hbm_bytes / targets.GiB:8.1f} {t.usable_hbm_bytes / targets.GiB:7.2f} "
              f"{t.hbm_bandwidth / 1e12:8.2f} {t.bf16_dense_flops / 1e12:9.0f} {'-':>4}  {'-':5} {link.name:28} "
              f"{link.bandwidth_per_gpu('d2h') / 1e9:.0f}/{link.bandwidth_per_gpu('h2d') / 1e9:.0f}{'':>11}  "
              f"{t.topology_name}")
    print(f"usable = {fraction:.2f} x HBM on a GPU (JAX's allocator, {targets.MEM_FRACTION_ENV}), the runtime's fixed "
          "limit on a TPU; per device = out/back with every device sharing the link busy")
    return 0
