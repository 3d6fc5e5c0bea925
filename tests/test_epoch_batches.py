"""An epoch's batches from length arrays (data/batching.py) and the training split's epochs
(train/data.TrainSet): the greedy rule in both regimes, a pure function of (seed, epoch), ranks'
shares disjoint, corpora sampled by weight."""

from __future__ import annotations

import numpy as np
import pytest

from attnmt.config import load_config
from attnmt.data.batching import epoch_batches
from attnmt.train.data import prepare_data


def _lengths(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 60, n).astype(np.uint16), rng.integers(1, 60, n).astype(np.uint16)


def _fits(size: np.ndarray, batch: np.ndarray, budget: int) -> bool:
    return len(batch) == 1 or int(size[batch].max()) * len(batch) <= budget


@pytest.mark.parametrize("pool", [100_000, 700], ids=["whole", "pooled"])
@pytest.mark.parametrize("by, budget", [("tokens", 600), ("sents", 16)])
def test_every_sentence_once_within_the_budget(pool, by, budget):
    src, tgt = _lengths(5000)
    batches = epoch_batches(src, tgt, budget, by, True, seed=3, epoch=2, pool=pool)
    seen = np.concatenate(list(batches))
    assert np.array_equal(np.sort(seen), np.arange(5000))
    size = np.maximum(tgt.astype(int) + 1, src)
    if by == "tokens":
        assert all(_fits(size, b, budget) for b in batches)
    else:
        assert all(len(b) <= budget for b in batches)
    # buckets: similar lengths together
    spread = [int(size[b].max() - size[b].min()) for b in batches]
    assert np.mean(spread) < 4


@pytest.mark.parametrize("pool", [100_000, 700], ids=["whole", "pooled"])
def test_a_pure_function_of_seed_and_epoch(pool):
    src, tgt = _lengths(3000)
    one = epoch_batches(src, tgt, 500, "tokens", True, 3, 1, pool=pool).lists()
    assert one == epoch_batches(src, tgt, 500, "tokens", True, 3, 1, pool=pool).lists()
    assert one != epoch_batches(src, tgt, 500, "tokens", True, 3, 2, pool=pool).lists()
    assert one != epoch_batches(src, tgt, 500, "tokens", True, 4, 1, pool=pool).lists()


def test_pooled_batches_are_the_greedy_rule_on_each_sorted_pool():
    """The pooled regime's run-by-run cut equals the greedy rule cutting the pool's sorted
    sentences one at a time."""
    src, tgt = _lengths(2000, seed=5)
    budget = 450
    batches = epoch_batches(src, tgt, budget, "tokens", True, 1, 1, pool=500)
    size = np.maximum(tgt.astype(int) + 1, src)
    by_pool: dict[int, list[np.ndarray]] = {}
    position = {int(i): k for k, i in enumerate(batches.order)}
    for b in batches:
        by_pool.setdefault(position[int(b[0])] // 500, []).append(b)
    for pool_batches in by_pool.values():
        pool_batches.sort(key=lambda b: position[int(b[0])])
        flat = np.concatenate(pool_batches)
        greedy, current, longest = [], [], 0
        for i in flat.tolist():
            s = max(longest, int(size[i]))
            if current and s * (len(current) + 1) > budget:
                greedy.append(current)
                current, s = [], int(size[i])
            current.append(i)
            longest = s
        greedy.append(current)
        assert [b.tolist() for b in pool_batches] == greedy


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_take_disjoint_shares_of_equal_size(world):
    src, tgt = _lengths(4000)
    batches = epoch_batches(src, tgt, 700, "tokens", True, 1, 1, pool=1000)
    shares = [batches.take(r, world) for r in range(world)]
    assert len({len(s) for s in shares}) == 1
    seen = [set(np.concatenate(list(s)).tolist()) for s in shares]
    for a in range(world):
        for b in range(a + 1, world):
            assert not seen[a] & seen[b]
    assert sum(len(s) for s in seen) >= 4000 - world * 700


def test_corpora_are_sampled_by_weight_each_epoch(tiny_corpus, tmp_path):
    """in-domain ×3 is three copies an epoch; ×0.5 a seeded half, another half next epoch."""
    d = tiny_corpus.directory
    other = tmp_path / "other"
    other.mkdir()
    for suffix in ("en", "es"):
        lines = (d / f"train.{suffix}").read_text().splitlines()[:100]
        (other / f"train.{suffix}").write_text("".join(x + "\n" for x in lines))
    cfg = load_config(tiny_corpus.config, [f"data.train={d}/train:3 {other}/train:0.5"])
    data = prepare_data(cfg, tmp_path / "run")
    ts = data.train
    first, second = ts.items(1), ts.items(2)
    assert len(first) == 3 * 512 + 50 == len(second)
    counts = np.bincount(first, minlength=612)
    assert (counts[:512] == 3).all()
    assert set(np.unique(counts[512:]).tolist()) == {0, 1} and counts[512:].sum() == 50
    assert not np.array_equal(first, second)  # another half
    assert np.array_equal(first, prepare_data(cfg, tmp_path / "run").train.items(1))  # resume agrees
    assert "×3" in " ".join(data.notes)


def test_a_lower_max_len_at_training_leaves_pairs_out_and_says_so(tiny_corpus, tmp_path):
    """A corpus prepared with max_len 20, trained with data.max_len 6."""
    prepare_data(load_config(tiny_corpus.config), tmp_path / "first")
    cfg = load_config(tiny_corpus.config, ["data.max_len=6", f"data.prepared={tmp_path}/first/data"])
    data = prepare_data(cfg, tmp_path / "run")
    ts = data.train
    assert 0 < ts.dropped < 512 and len(ts) == 512 - ts.dropped
    kept = ts.items(1)
    assert (np.asarray(ts.src.lengths)[kept] <= 6).all() and (np.asarray(ts.tgt.lengths)[kept] <= 6).all()
    assert f"{ts.dropped} over data.max_len 6 left out" in " ".join(data.notes)
