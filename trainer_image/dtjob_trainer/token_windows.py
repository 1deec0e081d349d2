"""Token files as nanoGPT writes them: one flat array of token ids (uint16, uint32 or
int32) per file, read through numpy's memmap so that a file of any size costs only the
pages a batch touches.

Sample i of a file is the window tokens[i*L : i*L + L] and its targets the same window
shifted by one token, so a file of T tokens holds (T - 1) // L samples. `TokenWindows` is
that set of windows as the trainer's data sets are used: `x[idx]` with an index tensor
(a batch), `x[start:stop]` and `x[i]` (evaluation), `.shape`, `.dim()`; each returns a
fresh int64 tensor. Only `.to(device)` reads the whole split (Hogwild shares it between
its processes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dtjob_api.spec import TokenDtype
from dtjob_trainer.errors import ConfigError

DEFAULT_DTYPE = TokenDtype.UINT16
_NUMPY = {TokenDtype.UINT16: np.uint16, TokenDtype.UINT32: np.uint32, TokenDtype.INT32: np.int32}


class TokenWindows:
    """Samples `first` .. `first + count - 1` of a memmapped token array, windows of
    `seq_len` tokens starting `shift` tokens in (0: inputs, 1: targets)."""

    def __init__(self, tokens: np.ndarray, seq_len: int, first: int, count: int, shift: int):
        self.tokens = tokens
        self.seq_len = seq_len
        self.first = first
        self.count = count
        self.shift = shift

    @property
    def shape(self) -> torch.Size:
        """(samples, seq_len), as a tensor of the windows would have."""
        return torch.Size((self.count, self.seq_len))

    def __len__(self) -> int:
        return self.count

    def dim(self) -> int:
        """2, as the windows' tensor."""
        return 2

    def __getitem__(self, index: int | slice | torch.Tensor | np.ndarray) -> torch.Tensor:
        rows = _rows(index, self.count)
        starts = (self.first + np.atleast_1d(rows)) * self.seq_len + self.shift
        # Fancy indexing on a memmap reads just these windows' pages.
        window = self.tokens[starts[:, None] + np.arange(self.seq_len)[None, :]]
        out = torch.from_numpy(window.astype(np.int64))
        return out[0] if np.ndim(rows) == 0 else out

    def to(self, device: torch.device | str) -> torch.Tensor:
        """Every window of this split as one tensor on `device` (reads them all)."""
        return self[:].to(device)


def _rows(index: int | slice | torch.Tensor | np.ndarray, count: int) -> np.ndarray:
    """The sample numbers `index` selects, as numpy would of an array of `count` rows
    (without making that array: a big file has millions of windows)."""
    if isinstance(index, slice):
        return np.arange(*index.indices(count))
    rows = np.asarray(index.cpu().numpy() if isinstance(index, torch.Tensor) else index)
    if rows.dtype == np.bool_ or not np.issubdtype(rows.dtype, np.integer):
        raise IndexError(f"token windows take integer indices, not {rows.dtype}")
    if rows.size and (rows.min() < -count or rows.max() >= count):
        raise IndexError(f"index out of range for {count} token windows")
    return np.where(rows < 0, rows + count, rows)


def open_tokens(field: str, path: str, dtype: TokenDtype | None) -> np.ndarray:
    """The token file at `path` as a read-only memmap; `field` names it in errors."""
    kind = _NUMPY[TokenDtype(dtype or DEFAULT_DTYPE)]
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{field}: {path} is not a file")
    if file.stat().st_size % np.dtype(kind).itemsize:
        raise ConfigError(f"{field}: the size of {path} is not a multiple of trainer.dataset.dtype")
    return np.memmap(file, dtype=kind, mode="r")


def window_count(tokens: np.ndarray, seq_len: int) -> int:
    """Whole windows (with their shifted targets) in a token array."""
    return max(0, (len(tokens) - 1) // seq_len)


def windows(
    tokens: np.ndarray, seq_len: int, first: int, count: int
) -> tuple[TokenWindows, TokenWindows]:
    """Inputs and targets of samples first .. first + count - 1."""
    return (
        TokenWindows(tokens, seq_len, first, count, 0),
        TokenWindows(tokens, seq_len, first, count, 1),
    )
