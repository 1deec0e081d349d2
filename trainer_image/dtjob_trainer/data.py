"""Data: scikit-learn's bundled digits (never downloaded), generated token sequences or
the user's own (data_sources.py: token files, an image folder, `datasets` on disk, a
factory), and the batch order.

The order is a pure function of (seed, step): samples are consumed as one stream over
epochs, epoch e being a permutation seeded by (seed, e), and step s takes stream positions
[s * B, (s + 1) * B). So a resumed run sees exactly the batches an uninterrupted run sees,
at any world size, and `shard(indices, part, parts)` splits a global batch into contiguous
pieces that concatenate back to it: data-parallel ranks together compute the
single-process batch. Pieces are equal when the batch divides; else the first B % parts
are one sample longer, and the strategies weight each rank's loss by its share
(strategies/common.py), so that a job resized to a world size that does not divide its
batch still trains the same model.
"""

from __future__ import annotations

import gzip
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import torch

from dtjob_api.spec import DatasetType
from dtjob_trainer.config import TrainerConfig
from dtjob_trainer.errors import ConfigError
from dtjob_trainer.token_windows import TokenWindows

# Distinct seed streams, so the split, the generated data and the order never correlate.
_SPLIT_STREAM = 1
_TOKENS_STREAM = 2
_ORDER_STREAM = 3


# A split's samples: a CPU tensor, or windows of a memmapped token file that read what
# they are indexed with (token_windows.py). Both index as x[idx], x[start:stop], x[i].
Samples: TypeAlias = torch.Tensor | TokenWindows


@dataclass(frozen=True)
class Dataset:
    """Train and held-out samples on the CPU. Targets are class indices (int64)."""

    x_train: Samples
    y_train: Samples
    x_test: Samples
    y_test: Samples

    @property
    def train_size(self) -> int:
        """Training samples."""
        return int(self.x_train.shape[0])


_STD_FLOOR = 0.1


def digits_xy() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits, as `load_digits(return_X_y=True)` gives them, read
    from its data file without importing scikit-learn: the import is over a second of every
    trainer process's start-up (several processes a pod, hundreds in the test suite), the
    parse a hundredth. Falls back to the import if the package keeps the file elsewhere."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    origin = spec.origin if spec is not None else None
    path = Path(origin).parent / "datasets" / "data" / "digits.csv.gz" if origin else None
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        return x, y
    with gzip.open(path, mode="rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")  # as scikit-learn parses it
    return data[:, :-1], data[:, -1].astype(int, copy=False)


def load_digits_arrays(seed: int, test_fraction: float) -> tuple[np.ndarray, ...]:
    """Digits split deterministically from the seed, each pixel standardised with the
    training split's mean and deviation: an MLP under plain SGD learns several times faster
    than on raw [0, 1] pixels (0.94 against 0.42 held-out after 300 steps at lr 0.05)."""
    x, y = digits_xy()
    order = np.random.default_rng([seed, _SPLIT_STREAM]).permutation(len(y))
    n_test = max(1, round(len(y) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    x = x.astype(np.float64) / 16.0
    mean, std = x[train].mean(axis=0), x[train].std(axis=0)
    # The floor (a tenth of the pixel range) keeps near-constant border pixels from being
    # blown up to tens of deviations by their rare ink (|x| stays under 10).
    x = (x - mean) / np.maximum(std, _STD_FLOOR)
    return x[train], y[train], x[test], y[test]


def synthetic_tokens(seed: int, samples: int, seq_len: int, vocab: int) -> np.ndarray:
    """Arithmetic token sequences (start + k * stride mod vocab): learnable from context,
    since the next token follows from the two before it. Shape (samples, seq_len + 1)."""
    rng = np.random.default_rng([seed, _TOKENS_STREAM])
    start = rng.integers(0, vocab, size=(samples, 1))
    stride = rng.integers(1, max(2, min(vocab, 16)), size=(samples, 1))
    positions = np.arange(seq_len + 1)[None, :]
    return np.asarray((start + stride * positions) % vocab, dtype=np.int64)


def _as_samples(field: str, value: Any, dtype: torch.dtype, targets: bool) -> Samples:
    """A part of a data set as samples: floating features in `dtype`, integer ones and
    targets as int64 (class and token ids)."""
    if isinstance(value, TokenWindows):
        return value
    try:
        tensor = torch.as_tensor(np.asarray(value) if not torch.is_tensor(value) else value)
    except Exception as exc:  # the user's data, the user's to fix
        raise ConfigError(
            f"{field}: cannot make a tensor of {type(value).__name__}: {exc}"
        ) from exc
    if targets or not tensor.is_floating_point():
        return tensor.long()
    return tensor.to(dtype)


def _own_data(cfg: TrainerConfig, dtype: torch.dtype) -> Dataset:
    from dtjob_trainer import data_sources as src

    t = cfg.trainer
    kind = t.dataset.type
    field = "trainer.dataset.factory" if kind == DatasetType.CUSTOM else "trainer.dataset.path"
    if kind == DatasetType.TOKEN_FILE:
        parts = src.token_file(t)
    elif kind == DatasetType.IMAGE_FOLDER:
        parts = src.image_folder(t, t.seed)
    elif kind == DatasetType.HF_DISK:
        parts = src.hf_disk(t)
    else:
        parts = src.custom_data(t, t.seed)
    x_tr, y_tr, x_te, y_te = (
        _as_samples(field, part, dtype, targets=i % 2 == 1) for i, part in enumerate(parts)
    )
    for x, y, split in ((x_tr, y_tr, "training"), (x_te, y_te, "test")):
        if x.shape[0] != y.shape[0] or x.shape[0] < 1:
            raise ConfigError(
                f"{field}: the {split} split has {x.shape[0]} inputs and {y.shape[0]} "
                "targets; it needs as many of each, at least one"
            )
    return Dataset(x_tr, y_tr, x_te, y_te)


def load_dataset(cfg: TrainerConfig, dtype: torch.dtype) -> Dataset:
    """The configured data set; features in `dtype` (tokens stay int64)."""
    t = cfg.trainer
    if t.dataset.type not in (DatasetType.DIGITS, DatasetType.SYNTHETIC_TOKENS):
        return _own_data(cfg, dtype)
    if t.dataset.type == DatasetType.DIGITS:
        x_tr, y_tr, x_te, y_te = load_digits_arrays(t.seed, t.dataset.testFraction)
        return Dataset(
            torch.from_numpy(x_tr).to(dtype),
            torch.from_numpy(y_tr).long(),
            torch.from_numpy(x_te).to(dtype),
            torch.from_numpy(y_te).long(),
        )
    m = t.model
    seqs = torch.from_numpy(synthetic_tokens(t.seed, t.dataset.samples, m.seqLen, m.vocabSize))
    n = len(seqs)
    # Keep at least one training sequence; a one-sequence data set is also its own test set.
    n_test = min(max(1, round(n * t.dataset.testFraction)), n - 1)
    train, test = seqs[n_test:], (seqs[:n_test] if n_test else seqs)
    return Dataset(train[:, :-1], train[:, 1:], test[:, :-1], test[:, 1:])


@lru_cache(maxsize=8)
def _epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, _ORDER_STREAM, epoch]).permutation(n)


def global_batch_indices(step: int, batch_size: int, n: int, seed: int) -> torch.Tensor:
    """Sample indices of the global batch of `step` (pure in its arguments)."""
    start = step * batch_size
    out = np.empty(batch_size, dtype=np.int64)
    filled = 0
    while filled < batch_size:
        epoch, offset = divmod(start + filled, n)
        take = min(batch_size - filled, n - offset)
        out[filled : filled + take] = _epoch_permutation(seed, epoch, n)[offset : offset + take]
        filled += take
    return torch.from_numpy(out)


def epoch_of(step: int, batch_size: int, n: int) -> int:
    """Epoch that the batch of `step` starts in."""
    return (step * batch_size) // n


def shard(indices: torch.Tensor, part: int, parts: int) -> torch.Tensor:
    """Contiguous piece `part` of `parts`: the first `size % parts` pieces one sample longer
    (torch.tensor_split's bounds), so an even split gives the equal pieces it always did."""
    base, extra = divmod(indices.shape[0], parts)
    start = part * base + min(part, extra)
    return indices[start : start + base + (1 if part < extra else 0)]


def batch(
    data: Dataset, step: int, batch_size: int, seed: int, part: int = 0, parts: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of shard `part`/`parts` of the global batch of `step`."""
    idx = shard(global_batch_indices(step, batch_size, data.train_size, seed), part, parts)
    return data.x_train[idx], data.y_train[idx]
