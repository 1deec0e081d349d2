"""A Custom model factory that yields its blocks one at a time (models/custom.py): it builds
the same model as the factory returning it whole, trains under FSDP and pipelines exactly
as in one process, and (measured) no FSDP rank or stage process ever holds the whole model
in host memory; its errors are config errors naming the field and the block."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.harness import launch
from unit.trainer.ranks import run_ranks
from unit.trainer.reference import assert_run_equals_reference
from unit.trainer.test_custom_model import custom_spec, pipeline, write_tokens
from unit.trainer.test_pipeline_sharding import _measure

from dtjob_trainer.config import load_config
from dtjob_trainer.errors import EXIT_CONFIG, ConfigError
from dtjob_trainer.models import build_model

STREAM = "tiny_models:residual_mlp_stream"
# 24 layers of 1200 x 1200 in fp64: 277 MB, 11.5 MB a block (large beside the measure's
# constant, the library pages a build first touches).
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
WIDE = {"width": 1200, "depth": 24, "classes": 10}


def _spec(strategy: str, tokens: Path, factory: str = STREAM, **kwargs: Any) -> dict[str, Any]:
    spec = custom_spec(strategy, tokens, factory=factory)
    if kwargs:
        spec["trainer"]["model"]["kwargs"] = kwargs
    return spec


def test_a_streamed_factory_builds_what_the_list_factory_builds(tmp_path: Path) -> None:
    small = {"width": 8, "depth": 3, "classes": 4}
    tokens = tmp_path / "t.bin"
    streamed = build_model(
        load_config(_spec("DataParallel", tokens, "tiny_models:wide_stream", **small)),
        torch.float64,
    )
    listed = build_model(
        load_config(_spec("DataParallel", tokens, "tiny_models:wide_list", **small)),
        torch.float64,
    )
    assert len(streamed) == 4
    want = dict(listed.named_parameters())
    for name, value in streamed.named_parameters():  # not close: identical
        assert torch.equal(value, want.pop(name)), name
    assert not want


@pytest.mark.parametrize("name", ["FSDP", "Pipeline-1F1B"])
def test_a_streamed_factory_trains_as_one_process(name: str, tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "train.bin")
    spec = _spec("FSDP", tokens) if name == "FSDP" else pipeline(tokens, "1F1B", factory=STREAM)
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert_run_equals_reference(out.result, spec)


@pytest.mark.parametrize(
    ("factory", "kwargs", "message"),
    [
        (
            "tiny_models:stream_failing_at",
            {"block": 2},
            "tiny_models:stream_failing_at raised RuntimeError making block 2: "
            "no weights for layer 2",
        ),
        (
            "tiny_models:stream_of",
            {"kind": "string"},
            "tiny_models:stream_of yielded str as block 0, not an nn.Module",
        ),
        ("tiny_models:stream_of", {"kind": "none"}, "tiny_models:stream_of yielded no blocks"),
    ],
)
def test_a_streamed_factorys_errors_name_the_field_and_block(
    factory: str, kwargs: dict[str, Any], message: str, tmp_path: Path
) -> None:
    cfg = load_config(_spec("DataParallel", tmp_path / "t.bin", factory, **kwargs))
    for meta in (False, True):
        with pytest.raises(ConfigError) as raised:
            build_model(cfg, torch.float64, meta=meta)
        assert str(raised.value) == f"trainer.model.factory: {message}"


def test_a_factory_failing_mid_stream_ends_the_run_with_exit_2(tmp_path: Path) -> None:
    spec = _spec("FSDP", write_tokens(tmp_path / "t.bin"), "tiny_models:stream_failing_at")
    spec["trainer"]["model"]["kwargs"] = {"block": 1}
    out = launch(spec, tmp_path)
    assert out.rc == EXIT_CONFIG, out.output
    assert "raised RuntimeError making block 1: no weights for layer 1" in out.output


def _kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _fsdp_peak(rank: int, world: int, spec: dict[str, Any]) -> dict[str, int]:
    """Rank body: FSDP's build (meta model, fully_shard, materialise) of `spec`'s model;
    the peak resident memory it added, and the bytes of this rank's shards."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from dtjob_trainer.meta_init import materialize_sharded

    # Large allocations mmapped and unmapped on free (glibc's M_MMAP_THRESHOLD, fixed):
    # resident memory is then the live tensors, not what the heap kept of freed ones.
    ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 65536)
    cfg = load_config(spec)
    mesh = init_device_mesh("cpu", (world,))
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # VmHWM := VmRSS
    before = _kib("VmRSS")
    model = build_model(cfg, torch.float64, meta=True)
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    materialize_sharded(model, cfg, torch.float64, torch.device("cpu"))
    peak = (_kib("VmHWM") - before) * 1024
    held = sum(p.to_local().numel() * 8 for p in model.parameters())
    return {"peak": peak, "held": held}


def test_no_fsdp_rank_holds_a_streamed_model_whole(tmp_path: Path) -> None:
    tokens = tmp_path / "t.bin"
    spec = _spec("FSDP", tokens, "tiny_models:wide_stream", **WIDE)
    whole_bytes = sum(p.numel() * 8 for p in build_model(load_config(spec), meta=True).parameters())
    assert whole_bytes > 270e6
    streamed = run_ranks(_fsdp_peak, 4, spec, workdir=tmp_path / "stream")
    listed = run_ranks(
        _fsdp_peak, 4, _spec("FSDP", tokens, "tiny_models:wide_list", **WIDE),
        workdir=tmp_path / "list",
    )  # fmt: skip
    # The measure sees a factory that makes every block before returning...
    assert min(r["peak"] for r in listed) > 0.9 * whole_bytes
    # ...while with the stream each rank holds its quarter and peaks at it plus the block
    # being made (in fp32 and fp64) and the library pages first touched.
    for r in streamed:
        assert r["held"] < 0.3 * whole_bytes
        assert r["peak"] < 0.5 * whole_bytes, r


def test_a_stage_process_never_holds_a_streamed_model_whole(tmp_path: Path) -> None:
    spec = pipeline(tmp_path / "t.bin", "GPipe", factory="tiny_models:wide_stream")
    spec["trainer"]["model"]["kwargs"] = WIDE
    spec["roles"]["stage"]["replicas"] = 4
    whole_bytes = sum(p.numel() * 8 for p in build_model(load_config(spec), meta=True).parameters())
    stage = _measure(spec, "stage")
    whole = _measure(spec, "whole")
    # The measure sees a whole build...
    assert whole["peak"] > 0.9 * whole_bytes
    # ...and stage 0 of 4 holds 7 of the 25 blocks (24 wide ones and a small head), and
    # peaks at them plus the block being made.
    assert stage["held"] < 0.3 * whole_bytes
    assert stage["peak"] < 0.5 * whole_bytes
