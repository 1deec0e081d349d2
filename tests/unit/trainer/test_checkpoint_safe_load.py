"""Checkpoints are loaded with `torch.load(weights_only=True)` (no pickled code runs from a
checkpoint volume): every strategy's state must consist of tensors and plain containers, or
its checkpoints would be skipped as unreadable and a restarted job would start over. Each
CPU example (but those whose state another covers, `SAME_STATE`) runs a few steps with a
checkpoint at the end, and the loader must read it. Sharded checkpoints (FSDP, CPUOffload,
the pipelines on torch's schedules) are read whole through the same safe DCP reader the
ranks use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from unit.trainer.harness import launch

from dtjob_trainer.checkpoint import Checkpointer
from dtjob_trainer.sharded import read_full
from helpers.examples import load_job

EXAMPLES_DIR = Path(__file__).parents[3] / "examples"
# Examples whose checkpoint holds the same state as another's (the strategy, not the
# example, decides it), left out to keep the tier's time: name -> the one that covers it.
SAME_STATE = {
    "custom-image": "data-parallel",  # its trainer.command removed: the bundled DataParallel
    "tf-multi-worker-mirrored": "data-parallel",  # an alias of DataParallel
    "pipeline-gpipe": "pipeline-interleaved",  # the schedule does not change the state
    "pipeline-1f1b": "pipeline-interleaved",
}
EXAMPLES = [p for p in sorted((EXAMPLES_DIR / "cpu").glob("*.yaml")) if p.stem not in SAME_STATE]


def test_every_left_out_example_is_covered_by_one_that_runs() -> None:
    names = {p.stem for p in EXAMPLES}
    assert set(SAME_STATE.values()) <= names
    for left_out, covering in SAME_STATE.items():
        a, b = (load_job(EXAMPLES_DIR / "cpu" / f"{n}.yaml")["spec"] for n in (left_out, covering))
        aliases = {"MultiWorkerMirroredStrategy": "DataParallel"}
        kind_a, kind_b = (aliases.get(s["strategy"]["type"], s["strategy"]["type"]) for s in (a, b))
        assert kind_a == kind_b, (left_out, covering)


STEPS = 4


def short_run(example: Path) -> dict[str, Any]:
    """The example's spec, trained for a few steps with a checkpoint at the last one."""
    spec: dict[str, Any] = load_job(example)["spec"]
    trainer = {**spec["trainer"], "steps": STEPS, "logEverySteps": 1}
    trainer.pop("command", None)
    if "codePath" in trainer:  # in the cluster a mounted ConfigMap of examples/<name>/
        trainer["codePath"] = str(EXAMPLES_DIR / example.stem)
    for role in spec["roles"].values():  # no pod resources locally
        for key in ("cpu", "memory"):
            role.pop(key, None)
    return {**spec, "trainer": trainer, "checkpoint": {"everySteps": STEPS, "keep": 1}}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_strategys_checkpoint_loads_with_weights_only(example: Path, tmp_path: Path) -> None:
    outcome = launch(short_run(example), tmp_path, timeout=300)
    assert outcome.rc == 0, outcome.output[-3000:]
    # Asynchronous parameter-server modes checkpoint on each server (ps-<i>/), counting
    # the server's own updates; the others write one checkpoint of the job's steps.
    servers = sorted(outcome.checkpoint_dir.glob("ps-*"))
    for directory in servers or [outcome.checkpoint_dir]:
        loaded = Checkpointer(directory).load_latest()
        assert loaded is not None, (directory, outcome.output[-3000:])
        assert loaded.step > 0 if servers else loaded.step == STEPS
        if loaded.sharded:
            assert loaded.path is not None
            state = read_full(loaded.path)
            assert state["model"] and "optimizer" in state, sorted(state)
        else:
            assert loaded.state
