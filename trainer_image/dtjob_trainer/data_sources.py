"""The user's own data (trainer.dataset): token files (memmapped, never read whole), an
image folder, a `datasets` directory (`datasets.load_from_disk`, when the package is in
the image) or a Custom factory. Each returns the four parts of a `data.Dataset`; without
testPath, the first testFraction of the samples is held out (the order is the files').

Everything a user can get wrong (a missing file, an unknown column, a factory that
raises) is a ConfigError naming the field (exit 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dtjob_api.spec import TrainerSpec
from dtjob_trainer.errors import ConfigError
from dtjob_trainer.factory import call_factory
from dtjob_trainer.token_windows import open_tokens, window_count, windows

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
DEFAULT_IMAGE_SIZE = 32
DEFAULT_INPUT_COLUMN = "input"
DEFAULT_TARGET_COLUMN = "label"
Parts = tuple[Any, Any, Any, Any]


def held_out(n: int, fraction: float) -> int:
    """Samples held out of `n` (at least one, and at least one left to train on; a
    one-sample set is its own test set)."""
    return min(max(1, round(n * fraction)), n - 1)


def token_file(t: TrainerSpec) -> Parts:
    """TokenFile: windows of trainer.model.seqLen tokens of the memmapped files."""
    d, seq_len = t.dataset, t.model.seqLen
    assert d.path is not None  # the API's rules require it
    train = open_tokens("trainer.dataset.path", d.path, d.dtype)
    n = window_count(train, seq_len)
    if d.testPath:
        test = open_tokens("trainer.dataset.testPath", d.testPath, d.dtype)
        n_test = window_count(test, seq_len)
        if n < 1 or n_test < 1:
            raise ConfigError(
                f"trainer.dataset.path: fewer than trainer.model.seqLen + 1 = {seq_len + 1} "
                "tokens in the training or the test file"
            )
        x, y = windows(train, seq_len, 0, n)
        x_test, y_test = windows(test, seq_len, 0, n_test)
        return x, y, x_test, y_test
    if n < 1:
        raise ConfigError(
            f"trainer.dataset.path: {d.path} holds {len(train)} tokens, fewer than "
            f"trainer.model.seqLen + 1 = {seq_len + 1}"
        )
    n_test = held_out(n, d.testFraction) if n > 1 else 1
    first = n_test if n > 1 else 0
    x, y = windows(train, seq_len, first, n - first)
    x_test, y_test = windows(train, seq_len, 0, n_test)
    return x, y, x_test, y_test


def _image_files(
    field: str, root: str, classes: Sequence[str] | None
) -> tuple[list[Path], list[int], list[str]]:
    base = Path(root)
    if not base.is_dir():
        raise ConfigError(f"{field}: {root} is not a directory")
    names = list(classes) if classes else sorted(p.name for p in base.iterdir() if p.is_dir())
    files: list[Path] = []
    labels: list[int] = []
    for label, name in enumerate(names):
        found = sorted(p for p in (base / name).glob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        files += found
        labels += [label] * len(found)
    if not files:
        raise ConfigError(f"{field}: no .png or .jpg images under {root}/<class>/")
    return files, labels, names


def _load_images(files: list[Path], size: int) -> np.ndarray:
    from PIL import Image

    out = np.empty((len(files), 3, size, size), dtype=np.float32)
    for i, file in enumerate(files):
        with Image.open(file) as image:
            rgb = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
        out[i] = np.asarray(rgb, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return out


def image_folder(t: TrainerSpec, seed: int) -> Parts:
    """ImageFolder: root/<class>/*.png|jpg, classes sorted by name, images resized to
    imageSize x imageSize RGB in [0, 1], shape (N, 3, S, S). Loaded into memory at that
    size; without testPath a seeded share is held out."""
    d = t.dataset
    assert d.path is not None
    size = d.imageSize or DEFAULT_IMAGE_SIZE
    files, labels, names = _image_files("trainer.dataset.path", d.path, None)
    x, y = _load_images(files, size), np.asarray(labels, dtype=np.int64)
    if d.testPath:
        test_files, test_labels, _ = _image_files("trainer.dataset.testPath", d.testPath, names)
        return x, y, _load_images(test_files, size), np.asarray(test_labels, dtype=np.int64)
    order = np.random.default_rng([seed, 1]).permutation(len(y))
    n_test = held_out(len(y), d.testFraction) if len(y) > 1 else 1
    test, train = order[:n_test], (order[n_test:] if len(y) > 1 else order)
    return x[train], y[train], x[test], y[test]


def hf_disk(t: TrainerSpec) -> Parts:
    """HFDisk: a directory written by `datasets`' save_to_disk (a Dataset, or a
    DatasetDict with "train" and "test"), its inputColumn and targetColumn as arrays."""
    d = t.dataset
    assert d.path is not None
    try:
        import datasets  # type: ignore[import-not-found, unused-ignore]
    except ModuleNotFoundError:
        raise ConfigError(
            "trainer.dataset.type: HFDisk needs the Python package `datasets`, which the "
            "trainer image does not have: build an image with it (pip install datasets)"
        ) from None
    columns = (d.inputColumn or DEFAULT_INPUT_COLUMN, d.targetColumn or DEFAULT_TARGET_COLUMN)

    def load(field: str, path: str) -> Any:
        try:
            return datasets.load_from_disk(path)
        except Exception as exc:  # a bad directory is the user's to fix
            raise ConfigError(f"{field}: load_from_disk({path}) failed: {exc}") from exc

    def arrays(ds: Any) -> tuple[np.ndarray, np.ndarray]:
        for field, column in zip(("inputColumn", "targetColumn"), columns, strict=True):
            if column not in ds.column_names:
                raise ConfigError(
                    f"trainer.dataset.{field}: no column {column!r} (has {ds.column_names})"
                )
        numpy = ds.with_format("numpy")
        return np.asarray(numpy[columns[0]]), np.asarray(numpy[columns[1]])

    whole = load("trainer.dataset.path", d.path)
    if d.testPath:
        return (*arrays(whole), *arrays(load("trainer.dataset.testPath", d.testPath)))
    if hasattr(whole, "keys") and "train" in whole:
        train = whole["train"]
        if "test" in whole:
            return (*arrays(train), *arrays(whole["test"]))
        whole = train
    x, y = arrays(whole)
    n_test = held_out(len(y), d.testFraction) if len(y) > 1 else 1
    return x[n_test:] if len(y) > 1 else x, y[n_test:] if len(y) > 1 else y, x[:n_test], y[:n_test]


def custom_data(t: TrainerSpec, seed: int) -> Parts:
    """Custom: trainer.dataset.factory, called after torch.manual_seed(seed) (so random
    data is the same in every process), returns (x_train, y_train, x_test, y_test) as
    arrays or tensors, or (train, test) map-style datasets of (x, y) pairs, which are
    stacked into tensors."""
    d = t.dataset
    assert d.factory is not None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        built = call_factory("trainer.dataset.factory", d.factory, d.kwargs, t.codePath)
    if isinstance(built, tuple | list) and len(built) == 4:
        return built[0], built[1], built[2], built[3]
    if isinstance(built, tuple | list) and len(built) == 2:
        return (*_stacked(built[0]), *_stacked(built[1]))
    raise ConfigError(
        f"trainer.dataset.factory: {d.factory} returned {type(built).__name__}; it must return "
        "(x_train, y_train, x_test, y_test) or (train, test) map-style datasets"
    )


def _stacked(ds: Any) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        pairs = [ds[i] for i in range(len(ds))]
        xs = torch.stack([torch.as_tensor(x) for x, _ in pairs])
        ys = torch.stack([torch.as_tensor(y) for _, y in pairs])
    except Exception as exc:  # the factory's data set, the user's to fix
        raise ConfigError(
            f"trainer.dataset.factory: a returned data set is not a map-style data set of "
            f"(x, y) pairs: {type(exc).__name__}: {exc}"
        ) from exc
    return xs, ys
