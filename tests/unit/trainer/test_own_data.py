"""The user's own data (trainer.dataset): token files read through a memmap (windows of
seqLen tokens, targets shifted by one, never the whole file), image folders, `datasets`
directories (a clear error without the package) and Custom factories."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from unit.trainer.harness import a_spec, launch
from unit.trainer.reference import assert_run_equals_reference

from dtjob_trainer.config import load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.errors import ConfigError
from dtjob_trainer.evaluate import accuracy
from dtjob_trainer.token_windows import TokenWindows

CODE = str(Path(__file__).parent / "custom_code")
F64 = torch.float64


def config(dataset: dict[str, Any], model: dict[str, Any] | None = None) -> Any:
    model = model or {"type": "GPT", "seqLen": 4, "vocabSize": 1000}
    return load_config(a_spec(model=model, dataset=dataset, codePath=CODE))


def test_token_windows_are_shifted_slices_of_the_file(tmp_path: Path) -> None:
    tokens = np.arange(41, dtype=np.uint16)  # 10 windows of 4 (+1 for the last target)
    tokens.tofile(tmp_path / "t.bin")
    data = load_dataset(config({"type": "TokenFile", "path": str(tmp_path / "t.bin")}), F64)
    assert isinstance(data.x_train, TokenWindows) and isinstance(data.x_train.tokens, np.memmap)
    # testFraction 0.2: the first 2 windows are held out, the other 8 train.
    assert data.x_test.shape == (2, 4) and data.train_size == 8
    assert data.x_test[1].tolist() == [4, 5, 6, 7] and data.y_test[1].tolist() == [5, 6, 7, 8]
    x, y = data.x_train[torch.tensor([7, 0])], data.y_train[torch.tensor([7, 0])]
    assert x.dtype == torch.int64
    assert x.tolist() == [[36, 37, 38, 39], [8, 9, 10, 11]]
    assert y.tolist() == [[37, 38, 39, 40], [9, 10, 11, 12]]
    assert data.x_test[0:2].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert data.x_train.to("cpu").shape == (8, 4)


@pytest.mark.parametrize("dtype", ["uint32", "int32"])
def test_token_file_with_a_test_file_and_wider_ids(tmp_path: Path, dtype: str) -> None:
    np.arange(100_000, 100_009, dtype=dtype).tofile(tmp_path / "train.bin")
    np.arange(7, dtype=dtype).tofile(tmp_path / "val.bin")
    dataset = {"type": "TokenFile", "path": str(tmp_path / "train.bin"), "dtype": dtype,
               "testPath": str(tmp_path / "val.bin")}  # fmt: skip
    data = load_dataset(config(dataset), F64)
    assert data.train_size == 2 and data.x_test.shape == (1, 4)
    assert data.x_train[1].tolist() == [100_004, 100_005, 100_006, 100_007]
    assert data.y_test[0].tolist() == [1, 2, 3, 4]


def _rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_big_token_file_is_never_read_whole(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with big.open("wb") as f:
        f.truncate(256 * 2**20)  # 128 Mi tokens, sparse on disk
    cfg = config({"type": "TokenFile", "path": str(big)}, {"type": "GPT", "seqLen": 64})
    before = _rss_bytes()
    data = load_dataset(cfg, F64)
    for step in range(5):
        x, _ = batch(data, step, 64, 0)
    xs = data.x_test[0:512]
    grown = _rss_bytes() - before
    assert data.train_size > 1_500_000 and x.shape == (64, 64) and xs.shape == (512, 64)
    # Reading the file whole would add its 256 MiB (and 1 GiB as int64). What a batch
    # touches is mapped with the kernel's fault-around (64 KiB a window here), and the
    # epoch's permutation of 2 Mi windows takes 16 MiB.
    assert grown < 96 * 2**20, f"RSS grew {grown / 2**20:.0f} MiB for a 256 MiB file"


def test_token_file_errors_name_the_field(tmp_path: Path) -> None:
    np.arange(3, dtype=np.uint16).tofile(tmp_path / "short.bin")
    (tmp_path / "odd.bin").write_bytes(b"\x00" * 3)
    for path, words in (
        (tmp_path / "missing.bin", "is not a file"),
        (tmp_path / "odd.bin", "not a multiple of trainer.dataset.dtype"),
        (tmp_path / "short.bin", "fewer than trainer.model.seqLen + 1"),
    ):
        with pytest.raises(ConfigError, match=r"trainer\.dataset\.path") as err:
            load_dataset(config({"type": "TokenFile", "path": str(path)}), F64)
        assert words in str(err.value)


def write_images(root: Path, sizes: tuple[int, int] = (10, 6)) -> None:
    """Two classes: red and blue images of mixed sizes, PNG and JPEG."""
    for name, colour in (("red", (255, 0, 0)), ("blue", (0, 0, 255))):
        (root / name).mkdir(parents=True)
        for i in range(6):
            shade = tuple(int(c * (0.6 + 0.05 * i)) for c in colour)
            image = Image.new("RGB", (sizes[i % 2], sizes[(i + 1) % 2]), shade)
            image.save(root / name / f"{i}.{'png' if i % 2 else 'jpg'}")
    (root / "red" / "notes.txt").write_text("not an image")


def image_model(size: int) -> dict[str, Any]:
    return {"type": "Custom", "factory": "tiny_models:image_classifier",
            "kwargs": {"size": size, "classes": 2}}  # fmt: skip


def test_image_folder_classes_are_sorted_and_images_resized(tmp_path: Path) -> None:
    write_images(tmp_path / "train")
    write_images(tmp_path / "test")
    dataset = {"type": "ImageFolder", "path": str(tmp_path / "train"), "imageSize": 4,
               "testPath": str(tmp_path / "test")}  # fmt: skip
    data = load_dataset(config(dataset, image_model(4)), F64)
    assert isinstance(data.x_train, torch.Tensor) and isinstance(data.y_train, torch.Tensor)
    assert data.x_train.shape == (12, 3, 4, 4) and data.x_train.dtype == F64
    # "blue" sorts before "red": class 0 is blue (its blue channel is the bright one).
    blue = data.x_train[data.y_train == 0]
    assert blue.shape[0] == 6 and bool((blue[:, 2] > 0.5).all() and (blue[:, 0] < 0.1).all())
    assert data.y_test.tolist() == data.y_train.tolist()


def test_image_folder_without_images_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"trainer\.dataset\.path: no \.png or \.jpg images"):
        load_dataset(config({"type": "ImageFolder", "path": str(tmp_path / "empty")},
                            image_model(4)), F64)  # fmt: skip


def test_custom_model_on_an_image_folder_equals_single_process(tmp_path: Path) -> None:
    write_images(tmp_path / "images")
    dataset = {"type": "ImageFolder", "path": str(tmp_path / "images"), "imageSize": 4,
               "testFraction": 0.25}  # fmt: skip
    spec = a_spec(model=image_model(4), dataset=dataset, codePath=CODE, batchSize=4, steps=6)
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert_run_equals_reference(out.result, spec)


@pytest.mark.parametrize("factory", ["tiny_models:blobs", "tiny_models:blob_pairs"])
def test_custom_data_factory_is_seeded_and_typed(factory: str) -> None:
    dataset = {"type": "Custom", "factory": factory,
               "kwargs": {"n": 40, "features": 5, "classes": 3}}  # fmt: skip
    model = {"type": "Custom", "factory": "tiny_models:classifier",
             "kwargs": {"features": 5, "classes": 3}}  # fmt: skip
    cfg = config(dataset, model)
    a, b = load_dataset(cfg, F64), load_dataset(cfg, F64)
    assert isinstance(a.x_train, torch.Tensor) and isinstance(b.x_train, torch.Tensor)
    assert torch.equal(a.x_train, b.x_train) and a.x_train.dtype == F64
    assert a.y_train.dtype == torch.int64 and a.train_size == 30 and a.x_test.shape == (10, 5)
    from dtjob_trainer.models import build_model

    assert 0.0 <= accuracy(build_model(cfg, F64), a, torch.device("cpu")) <= 1.0


def test_a_failing_data_factory_names_the_field() -> None:
    cfg = config({"type": "Custom", "factory": "tiny_models:no_data"})
    with pytest.raises(ConfigError) as err:
        load_dataset(cfg, F64)
    assert str(err.value) == (
        "trainer.dataset.factory: tiny_models:no_data raised FileNotFoundError: /data/missing.npz"
    )


def test_hf_disk_without_the_datasets_package_says_so(tmp_path: Path) -> None:
    try:
        import datasets  # noqa: F401
    except ModuleNotFoundError:
        pass
    else:
        pytest.skip("the datasets package is installed here")
    with pytest.raises(ConfigError) as err:
        load_dataset(config({"type": "HFDisk", "path": str(tmp_path)}), F64)
    assert "trainer.dataset.type: HFDisk needs the Python package `datasets`" in str(err.value)


def test_hf_disk_reads_the_named_columns(tmp_path: Path) -> None:
    """Runs where the `datasets` package is installed (not in the bundled image)."""
    hf = pytest.importorskip("datasets")
    rows = {"ids": [[i, i + 1, i + 2] for i in range(10)], "next": list(range(10))}
    hf.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "flat"))
    split = {"train": rows, "test": {"ids": [[7, 8, 9]], "next": [3]}}
    hf.DatasetDict({k: hf.Dataset.from_dict(v) for k, v in split.items()}).save_to_disk(
        str(tmp_path / "dict")
    )
    model = {"type": "Custom", "factory": "tiny_models:classifier",
             "kwargs": {"features": 3, "classes": 10}}  # fmt: skip
    columns = {"type": "HFDisk", "inputColumn": "ids", "targetColumn": "next"}
    flat = load_dataset(config({**columns, "path": str(tmp_path / "flat")}, model), F64)
    # testFraction 0.2: the first 2 rows are held out.
    assert flat.y_test.tolist() == [0, 1] and flat.y_train.tolist() == list(range(2, 10))
    assert flat.x_train[0].tolist() == [2, 3, 4] and flat.x_train.dtype == torch.int64
    both = load_dataset(config({**columns, "path": str(tmp_path / "dict")}, model), F64)
    assert both.train_size == 10 and both.x_test.tolist() == [[7, 8, 9]]
    with pytest.raises(ConfigError, match=r"trainer\.dataset\.targetColumn: no column 'label'"):
        load_dataset(config({"type": "HFDisk", "path": str(tmp_path / "flat"),
                             "inputColumn": "ids"}, model), F64)  # fmt: skip
