"""Pipelines at scale, on CPU: a stage process builds only its own stages (bit-identical to
the whole model's, and measured: its peak memory is its stages' share), and writes sharded
checkpoints in FSDP's layout that resume at another stage count, another dp size, under
FSDP and DataParallel (and FSDP's under Pipeline: test_fsdp_sharding.py), on the
uninterrupted loss trajectory (fp64); full checkpoints of earlier versions still resume."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
from unit.trainer.harness import CHILD_PATH, LAUNCH_SECONDS, a_spec, child_env, launch
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run
from unit.trainer.tp_models import GPT_DATA

from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.config import load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.dcp_io import SafeReader
from dtjob_trainer.models import build_model, loss_fn, split_into_stages
from dtjob_trainer.optim import build_optimizer
from dtjob_trainer.sharded import read_full
from dtjob_trainer.state import select_optimizer_state
from dtjob_trainer.strategies.pipeline import merge_stage_states
from dtjob_trainer.strategies.stage_build import build_own_stages

ADAM = {"type": "Adam", "lr": 0.01}
GPT = {"type": "GPT", "layers": 3, "dModel": 16, "heads": 2, "seqLen": 8, "vocabSize": 11}


@pytest.mark.parametrize(("model", "stages"), [("MLP", 4), ("GPT", 3)])
def test_own_stages_equal_the_whole_models(model: str, stages: int) -> None:
    if model == "GPT":
        spec = a_spec("Pipeline", None, stages=2, model=GPT, dataset={"type": "SyntheticTokens"})
    else:
        spec = a_spec("Pipeline", None, stages=2)
    cfg = load_config(spec)
    whole = split_into_stages(build_model(cfg, torch.float64), stages)
    names = [n for n, _ in build_model(cfg, torch.float64).named_parameters()]
    # Interleaved1F1B's round-robin chunks: rank 0 of 2 holds stages 0 and 2.
    for indices in ([i] for i in range(stages)), [[0, 2]]:
        for chosen in indices:
            mine, full_names = build_own_stages(cfg, torch.float64, stages, chosen)
            assert full_names == names
            for got, index in zip(mine, chosen, strict=True):
                want = dict(whole[index].named_parameters())
                have = dict(got.named_parameters())
                assert have.keys() == want.keys()
                for name, value in want.items():  # not close: identical
                    assert torch.equal(have[name], value), name


# Peak resident memory of a process that builds stage 0 of 4 of a ~130 MB fp64 MLP (13
# blocks of ~11 MB), or the whole model, above what it held before: Linux's high-water mark
# (VmHWM, reset by clear_refs 5 after the imports), so building the whole model and then
# dropping the other stages would show.
_MEASURE = """
import json, sys, torch
from dtjob_trainer.config import load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.dcp_io import SafeReader
from dtjob_trainer.models import build_model
from dtjob_trainer.state import select_optimizer_state
from dtjob_trainer.strategies.pipeline import merge_stage_states
from dtjob_trainer.strategies.stage_build import build_own_stages

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)

cfg = load_config(json.loads(sys.argv[1]))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = kib("VmRSS")
if sys.argv[2] == "whole":
    kept = [build_model(cfg, torch.float64)]
else:
    kept, _ = build_own_stages(cfg, torch.float64, 4, [0])
peak = kib("VmHWM") - before
held = sum(p.numel() * p.element_size() for m in kept for p in m.parameters())
print(json.dumps({"peak": peak * 1024, "held": held}))
"""


def _measure(spec: dict[str, Any], what: str) -> dict[str, int]:
    # Large allocations mmapped and unmapped on free: resident memory is then the live
    # tensors, not what glibc's heap kept of freed ones.
    env = {**child_env(), "PYTHONPATH": ":".join(CHILD_PATH), "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, json.dumps(spec), what],
        env=env,
        capture_output=True,
        text=True,
        # A build of 130-280 MB with every large allocation mmapped: 19 s on an idle CI
        # machine, over 120 s on a loaded one (the lanes' load reached 14 on 2 cores).
        timeout=LAUNCH_SECONDS,
        check=True,
    )
    result: dict[str, int] = json.loads(out.stdout.splitlines()[-1])
    return result


def test_a_stage_process_never_holds_the_whole_model() -> None:
    spec = a_spec("Pipeline", None, stages=4, model={"type": "MLP", "hiddenSizes": [1200] * 12})
    whole_bytes = sum(p.numel() * 8 for p in build_model(load_config(spec), meta=True).parameters())
    assert whole_bytes > 120e6
    whole = _measure(spec, "whole")
    stage = _measure(spec, "stage")
    # The measure sees a whole build...
    assert whole["peak"] > 0.9 * whole_bytes
    # ...and a stage build peaks at its share (4 of 13 blocks), plus the block being made
    # (in fp32 and fp64) and the library pages first touched.
    assert stage["held"] < 0.3 * whole_bytes
    assert stage["peak"] < 0.6 * whole_bytes


def _pp_spec(
    stages: int, steps: int, schedule: str = "1F1B", per_rank: int | None = None, dp: int = 0
) -> dict[str, Any]:
    pipeline: dict[str, Any] = {"schedule": schedule, "microbatches": 4}
    if per_rank:
        pipeline["stagesPerRank"] = per_rank
    extra: dict[str, Any] = {"pipeline": pipeline}
    if dp:
        extra["hybrid"] = {"dataParallel": dp}
    return a_spec(
        "Hybrid" if dp else "Pipeline", workers=None, stages=stages, strategy_extra=extra,
        steps=steps, checkpoint_every=6, optimizer=ADAM,
    )  # fmt: skip


def _written(out: Any, ranks: int) -> Path:
    """The sharded checkpoint of step 6 of a finished first run, checked."""
    assert out.rc == 0, out.output
    assert Checkpointer(out.checkpoint_dir).steps() == [6]
    path: Path = out.checkpoint_dir / "step-000000006"
    assert path.is_dir() and not list(out.checkpoint_dir.glob("*.pt"))
    assert {f.name for f in path.glob("*.distcp")} <= {f"__{r}_0.distcp" for r in range(ranks)}
    return path


def _resume_matches(spec: dict[str, Any], src: Path, tmp_path: Path, *args: str) -> None:
    shutil.copytree(src, tmp_path / "job-ckpt")
    out = launch(spec, tmp_path, *args)
    assert out.rc == 0, out.output
    assert out.result is not None and out.result["start_step"] == 6
    ref = reference_run(spec)
    assert_losses_close(out.result["losses"], ref.losses[6:], "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")


@pytest.fixture(scope="module")
def written_by_2_stages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint of step 6 of a 2-stage 1F1B Pipeline, its full state checked."""
    workdir = tmp_path_factory.mktemp("pp2")
    spec = _pp_spec(2, 6)
    path = _written(launch(spec, workdir), 2)
    # Both stage ranks wrote their blocks, keyed by the full model's names.
    assert {f.name for f in path.glob("*.distcp")} == {"__0_0.distcp", "__1_0.distcp"}
    full = read_full(path)
    assert_params_close(full["model"], reference_run(spec).params, "fp64")
    names = list(full["model"])
    assert full["optimizer"]["param_groups"][0]["params"] == names
    assert set(full["optimizer"]["state"]) == set(names)
    return workdir / "job-ckpt"


@pytest.mark.parametrize(
    ("strategy", "nproc"), [("Pipeline", 4), ("FSDP", 2), ("CPUOffload", 2), ("DataParallel", 2)]
)
def test_a_2_stage_checkpoint_resumes_elsewhere(
    strategy: str, nproc: int, written_by_2_stages: Path, tmp_path: Path
) -> None:
    if strategy == "Pipeline":
        spec = _pp_spec(4, 12, schedule="GPipe")
    else:
        spec = a_spec(strategy, workers=nproc, steps=12, checkpoint_every=6, optimizer=ADAM)
    _resume_matches(spec, written_by_2_stages, tmp_path)


def test_an_interleaved_4_stage_checkpoint_resumes_at_2_stages(tmp_path: Path) -> None:
    # 2 ranks x 2 chunks: rank 0 writes stages 0 and 2, rank 1 stages 1 and 3.
    first = launch(_pp_spec(2, 6, schedule="Interleaved1F1B", per_rank=2), tmp_path / "a")
    _written(first, 2)
    _resume_matches(_pp_spec(2, 12), first.checkpoint_dir, tmp_path / "b")


def test_a_hybrid_checkpoint_resumes_at_another_dp_size(tmp_path: Path) -> None:
    first = launch(_pp_spec(4, 6, dp=2), tmp_path / "a")
    path = _written(first, 4)
    # The dp replicas offered identical tensors: DCP wrote each piece once (every byte of
    # the shard files is one the metadata points at, none a second copy), and spread the
    # writes over both replicas (4 files, not 2).
    metadata = SafeReader(path).read_metadata()
    referenced = sum(info.length for info in metadata.storage_data.values())
    files = list(path.glob("*.distcp"))
    assert len(files) == 4
    assert sum(f.stat().st_size for f in files) == referenced
    _resume_matches(_pp_spec(2, 12, dp=1), first.checkpoint_dir, tmp_path / "b")


def _full_checkpoint_of_earlier_versions(spec: dict[str, Any], steps: int, directory: Path) -> None:
    """What a 2-stage pipeline wrote before its checkpoints were sharded: rank 0 merged the
    stages' name-keyed states (`merge_stage_states`) into one full file. Built here from
    single-process training, cut the way the stages held it."""
    cfg = load_config(spec)
    t = cfg.trainer
    model = build_model(cfg, torch.float64)
    data = load_dataset(cfg, torch.float64)
    optimizer = build_optimizer(model.parameters(), t.optimizer)
    for step in range(steps):
        x, y = batch(data, step, t.batchSize, t.seed)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
    optim = get_optimizer_state_dict(model, optimizer)
    parts = []
    for stage in split_into_stages(model, 2):
        names = set(stage.state_dict())
        weights = {k: v.detach().clone() for k, v in stage.state_dict().items()}
        parts.append({"model": weights, "optimizer": select_optimizer_state(optim, names)})
    Checkpointer(directory).save(steps, "Pipeline", 2, merge_stage_states(parts))


def test_a_full_checkpoint_of_earlier_versions_still_resumes(tmp_path: Path) -> None:
    spec = _pp_spec(2, 12)
    _full_checkpoint_of_earlier_versions(spec, 6, tmp_path / "old" / "job-ckpt")
    old = Checkpointer(tmp_path / "old" / "job-ckpt").load_latest()
    assert old is not None and not old.sharded and old.strategy == "Pipeline"
    _resume_matches(spec, tmp_path / "old" / "job-ckpt", tmp_path / "new")


def test_a_gpt_checkpoint_with_qkv_split_by_heads_resumes_elsewhere(tmp_path: Path) -> None:
    # The fused qkv split by heads (_StridedShard) is written whole; the other split
    # parameters as pieces. Written at pp 2 x tp 2, read at tp 2 again and by a plain
    # 2-stage pipeline. A small token set (GPT_DATA): what is checked is the checkpoint's
    # layout and the resumed trajectory, which any data shows; with the default set each
    # launch scored 1,638 held-out sequences through the split pipeline (70 CPU-s in all).
    def spec(tp: int | None, steps: int) -> dict[str, Any]:
        extra: dict[str, Any] = {"pipeline": {"schedule": "1F1B", "microbatches": 2}}
        if tp:
            extra["tensorParallel"] = {"size": tp}
        return a_spec(
            "Pipeline", workers=None, stages=2 * (tp or 1), strategy_extra=extra, steps=steps,
            checkpoint_every=3, batchSize=8, model=GPT, dataset=GPT_DATA, optimizer=ADAM,
        )  # fmt: skip

    first = launch(spec(2, 3), tmp_path / "a")
    assert first.rc == 0, first.output
    path = first.checkpoint_dir / "step-000000003"
    assert_params_close(read_full(path)["model"], reference_run(spec(2, 3)).params, "fp64")
    for tp, where in ((2, "b"), (None, "c")):
        shutil.copytree(first.checkpoint_dir, tmp_path / where / "job-ckpt")
        out = launch(spec(tp, 6), tmp_path / where)
        assert out.rc == 0, out.output
        assert out.result is not None and out.result["start_step"] == 3
        ref = reference_run(spec(tp, 6))
        assert_losses_close(out.result["losses"], ref.losses[3:], "fp64")
        assert_params_close(out.result["params"], ref.params, "fp64")
