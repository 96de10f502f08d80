"""The decision experiment's rule (``companion.planning.decisions``): seeded, spanning, sorted by what compiles."""

import itertools

from companion.hardware import targets
from companion.planning import decisions

V5E = targets.target(decisions.TARGET)


def test_the_rule_is_seeded_and_spans_widths_sequences_depths_and_optimizer_offload():
    first = list(itertools.islice(decisions.draws(), 12))
    assert first == list(itertools.islice(decisions.draws(), 12))  # the same seed, the same draws
    assert first != list(itertools.islice(decisions.draws(seed=decisions.SEED + 1), 12))
    shapes = [shape for shape, _ in first]
    assert {s.d_model for s in shapes} == set(decisions.WIDTHS)  # seeded cycles: every width comes round
    assert {s.seq for s in shapes} == set(decisions.SEQS)
    assert {s.optimizer_offload for s in shapes} == {False, True}
    assert len({s.layers for s in shapes}) > 4
    for shape, depths in first:  # each depth from the budget's window around the chip's usable HBM
        assert shape.layers in depths and depths == decisions.window_depths(
            shape.d_model, shape.seq, shape.optimizer_offload, V5E)


def test_a_shape_is_llama_3_s_layer_at_its_width_with_the_pallas_kernel():
    cfg = decisions.Shape(3584, 5, 8192, True).model()
    assert (cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_dim) == (
        3584, 5, 28, 14, 128, 14336)
    assert cfg.flash_kernel == "fused" and cfg.vocab_size == 32_000
    assert decisions.Shape(3584, 5, 8192, True).state().optimizer_memory_host_offload


def _compiler(peaks: dict[str, float]):
    """A stand-in compile: full remat at ``peaks[key]`` of usable HBM, the levers pulled at 0.8 of that."""
    starts = [s for s, _ in itertools.islice(decisions.draws(), 40)] + [decisions.Shape(2048, 4, 4096, False)]
    def compile_at_batch_1(shape, policy):
        start = shape if policy == "full" else next(s for s in starts if decisions.offloaded(s) == shape)
        share = peaks[start.key] * (1.0 if policy == "full" else 0.8)
        return share <= 1.0, int(share * V5E.usable_hbm_bytes)
    return compile_at_batch_1


def test_the_compiler_sorts_each_draw_and_the_quotas_end_the_draws():
    usable = V5E.usable_hbm_bytes
    shape = decisions.Shape(2048, 4, 4096, False)
    assert decisions.classify(shape, _compiler({shape.key: 0.97}), usable)[0] == "near"
    assert decisions.classify(shape, _compiler({shape.key: 0.90}), usable)[0] == "open"
    assert decisions.classify(shape, _compiler({shape.key: 1.10}), usable)[0] == "offload_only"
    assert decisions.classify(shape, _compiler({shape.key: 1.40}), usable)[0] is None
    peaks = {s.key: [0.97, 0.80, 1.10, 1.50][i % 4] for i, (s, _) in enumerate(itertools.islice(decisions.draws(), 40))}
    quotas = {"near": 2, "offload_only": 2, "open": 3}
    drawn = decisions.draw(_compiler(peaks), quotas=quotas)
    kept = decisions.kept(drawn, quotas)
    assert [s.category for s in kept].count("near") == 2 and len(kept) == 7
    assert drawn[-1] in kept and all(s.draw == i for i, s in enumerate(drawn))  # stopped when the last quota filled
