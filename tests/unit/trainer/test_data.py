"""Data order and sharding: pure in (seed, step), shards concatenate to the global batch."""

from __future__ import annotations

import numpy as np
import torch
from unit.trainer.harness import a_spec

from dtjob_trainer.config import load_config
from dtjob_trainer.data import (
    batch,
    epoch_of,
    global_batch_indices,
    load_dataset,
    load_digits_arrays,
    shard,
    synthetic_tokens,
)


def test_batches_are_a_pure_function_of_seed_and_step() -> None:
    a = global_batch_indices(7, 32, 100, seed=3)
    assert torch.equal(a, global_batch_indices(7, 32, 100, seed=3))
    assert not torch.equal(a, global_batch_indices(7, 32, 100, seed=4))
    assert not torch.equal(a, global_batch_indices(8, 32, 100, seed=3))


def test_every_epoch_visits_each_sample_once() -> None:
    n, b = 100, 30  # batches straddle epoch boundaries
    stream = torch.cat([global_batch_indices(s, b, n, seed=0) for s in range(10)])
    for epoch in range(3):
        assert sorted(stream[epoch * n : (epoch + 1) * n].tolist()) == list(range(n))
    first, second = stream[:n], stream[n : 2 * n]
    assert not torch.equal(first, second)  # a fresh permutation per epoch
    assert epoch_of(3, b, n) == 0 and epoch_of(4, b, n) == 1


def test_shards_concatenate_to_the_global_batch() -> None:
    idx = global_batch_indices(5, 24, 1000, seed=1)
    for parts in (1, 2, 3, 4):
        assert torch.equal(torch.cat([shard(idx, p, parts) for p in range(parts)]), idx)


def test_shard_batches_match_global_batch_rows() -> None:
    cfg = load_config(a_spec("DataParallel"))
    data = load_dataset(cfg, torch.float64)
    x, y = batch(data, 3, 32, 0)
    x1, y1 = batch(data, 3, 32, 0, part=1, parts=2)
    assert torch.equal(x1, x[16:]) and torch.equal(y1, y[16:])


def test_digits_split_is_deterministic_and_disjoint() -> None:
    x_tr, y_tr, x_te, _ = load_digits_arrays(seed=0, test_fraction=0.2)
    assert len(x_tr) + len(x_te) == 1797 and len(x_te) == 359
    # Standardised on the training split: centred, unit deviation where pixels vary, bounded.
    assert np.allclose(x_tr.mean(axis=0), 0.0)
    std = x_tr.std(axis=0)
    assert np.isclose(std, 1.0).sum() > 40 and std.max() <= 1.0 + 1e-9
    assert np.abs(x_tr).max() < 10 and np.abs(x_te).max() < 20
    again = load_digits_arrays(seed=0, test_fraction=0.2)
    assert np.array_equal(again[2], x_te)
    rows_train = {r.tobytes() for r in x_tr}
    assert sum(r.tobytes() in rows_train for r in x_te) < 5  # a few digits are duplicates
    assert set(y_tr) == set(range(10))


def test_synthetic_tokens_follow_their_rule() -> None:
    seqs = synthetic_tokens(seed=0, samples=50, seq_len=16, vocab=97)
    assert seqs.shape == (50, 17) and seqs.min() >= 0 and seqs.max() < 97
    # Each sequence is arithmetic mod vocab: the next token follows from the previous two.
    assert np.array_equal((2 * seqs[:, 1:-1] - seqs[:, :-2]) % 97, seqs[:, 2:])
    cfg = load_config(
        a_spec(
            "DataParallel",
            model={"type": "GPT", "seqLen": 16, "vocabSize": 97},
            dataset={"type": "SyntheticTokens", "samples": 50},
        )
    )
    data = load_dataset(cfg, torch.float32)
    assert data.x_train.shape == (40, 16) and data.x_test.shape == (10, 16)
    assert torch.equal(data.x_train[:, 1:], data.y_train[:, :-1])  # targets are shifted inputs
