"""The heterogeneous pipeline (roles.stage.groups) on CPU over gloo, real stage processes.

- Synchronous form (GPipe/1F1B names, a flush per step; ModelParallel): per-step losses
  and the parameters after several Adam steps equal single-process training (fp64, 1e-10)
  with uneven stages given by the groups' blocks, and with stages balanced by measured
  block times. A wrong schedule (a missing flush, an update per micro-batch, a gradient
  not averaged over the micro-batches) would move them by far more.
- Asynchronous form (PipeDream): equals the single-process PipeDream reference (fp64).
- The flushing schedule's invariants; the balancing function's splits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from unit.trainer.harness import a_spec, launch
from unit.trainer.pipedream_reference import pipedream_reference
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run

from dtjob_trainer.errors import EXIT_CONFIG
from dtjob_trainer.strategies.pipedream_schedule import Op
from dtjob_trainer.strategies.stage_balance import balance_blocks, balance_blocks_by_stage
from dtjob_trainer.strategies.stage_groups import flush_actions

ADAM = {"type": "Adam", "lr": 0.01}


def grouped(
    groups: list[dict[str, Any]], schedule: str = "1F1B", microbatches: int = 4, **trainer: Any
) -> dict[str, Any]:
    """A Pipeline job whose stage pods are `groups` (fp64 MLP of 4 blocks, batch 32)."""
    extra = {"pipeline": {"schedule": schedule, "microbatches": microbatches}}
    replicas = sum(g.get("replicas", 1) for g in groups)
    spec = a_spec("Pipeline", workers=None, stages=replicas, strategy_extra=extra, **trainer)
    spec["roles"]["stage"]["groups"] = groups
    return spec


BIG = {"name": "big-memory", "replicas": 1, "memory": "8Gi"}
SMALL = {"name": "small", "replicas": 2, "memory": "1Gi"}


def test_flush_schedule_is_1f1b_with_one_update_at_the_end() -> None:
    for stage in range(3):
        actions = flush_actions(3, stage, 4, step=5)
        work = [a for a in actions if a.op in (Op.FORWARD, Op.BACKWARD)]
        assert sorted((a.op, a.microbatch) for a in work) == sorted(
            [(Op.FORWARD, m) for m in range(4)] + [(Op.BACKWARD, m) for m in range(4)]
        )
        assert {a.version for a in work} == {5}, "every micro-batch on the live W(5)"
        assert actions[-1].op == Op.UPDATE and actions[-1].microbatch is None
        assert actions[-1].version == 6 and sum(a.op == Op.UPDATE for a in actions) == 1
        in_flight = peak = 0
        for a in work:
            in_flight += 1 if a.op == Op.FORWARD else -1
            peak = max(peak, in_flight)
        assert peak == min(3 - stage, 4), "1F1B: at most S - s micro-batches alive"


@pytest.mark.parametrize("schedule", ["1F1B", "GPipe"])
def test_synchronous_form_equals_single_process(tmp_path: Path, schedule: str) -> None:
    groups = [{**BIG, "blocks": 2}, {**SMALL, "blocks": 1}]
    spec = grouped(groups, schedule, steps=6, optimizer=ADAM)
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None and out.result["strategy"] == "Pipeline"
    ref = reference_run(spec)
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")


def test_model_parallel_and_balanced_stages_equal_single_process(tmp_path: Path) -> None:
    spec = grouped([BIG, {**SMALL, "replicas": 1}], steps=5, optimizer=ADAM)
    spec["strategy"] = {"type": "ModelParallel"}
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None and out.result["strategy"] == "ModelParallel"
    assert "blocks per stage" in out.output
    ref = reference_run(spec)
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")


def test_asynchronous_form_equals_the_pipedream_reference(tmp_path: Path) -> None:
    # blocks 2, 1, 1 is split_into_stages' split of 4 blocks over 3 stages (the reference's).
    groups = [{**BIG, "blocks": 2}, {**SMALL, "blocks": 1}]
    spec = grouped(groups, "PipeDream", steps=6, optimizer=ADAM)
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    ref = pipedream_reference(spec, stages=3)
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")


def test_blocks_that_do_not_cover_the_model_exit_2(tmp_path: Path) -> None:
    spec = grouped([{**BIG, "blocks": 1}, {**SMALL, "blocks": 1}])
    out = launch(spec, tmp_path)
    assert out.rc == EXIT_CONFIG, out.output
    assert "roles.stage.groups" in out.output


@pytest.mark.parametrize(
    ("costs", "stages", "speeds", "want"),
    [
        ([1, 1, 1, 1], 2, None, [2, 2]),
        ([4, 1, 1, 1, 1], 2, None, [1, 4]),  # the heavy embedding alone
        ([1, 1, 1, 1, 4], 3, None, [1, 3, 1]),  # ties: the earlier stages shorter
        ([1, 1, 1, 1, 1, 1], 2, [1.0, 2.0], [2, 4]),  # a stage twice as fast takes twice
        ([5, 5, 5], 3, None, [1, 1, 1]),
    ],
)
def test_balance_minimises_the_slowest_stage(
    costs: list[float], stages: int, speeds: list[float] | None, want: list[int]
) -> None:
    assert balance_blocks(costs, stages, speeds) == want


def test_balance_is_optimal_against_brute_force() -> None:
    import itertools
    import random

    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(2, 8)
        s = rng.randint(1, n)
        costs = [rng.random() for _ in range(n)]
        got = balance_blocks(costs, s)
        assert sum(got) == n and min(got) >= 1

        def bottleneck(sizes: list[int], costs: list[float] = costs) -> float:
            out, i = 0.0, 0
            for k in sizes:
                out, i = max(out, sum(costs[i : i + k])), i + k
            return out

        best = min(
            bottleneck([b - a for a, b in zip((0, *cuts), (*cuts, n), strict=True)])
            for cuts in itertools.combinations(range(1, n), s - 1)
        )
        assert bottleneck(got) == pytest.approx(best, abs=1e-12)


def test_balance_refuses_impossible_splits() -> None:
    with pytest.raises(ValueError, match="cannot split"):
        balance_blocks([1.0, 1.0], 3)


def test_balance_by_stage_gives_the_faster_device_more_blocks() -> None:
    # A CPU stage 4x slower than the GPU stage on every block: 8 equal blocks split 1 / 7
    # (CPU 1 x 4 = 4, GPU 7 x 1 = 7), not 4 / 4 (CPU 16) nor 2 / 6 (CPU 8).
    cpu, gpu = [4.0] * 8, [1.0] * 8
    assert balance_blocks_by_stage([cpu, gpu]) == [1, 7]
    assert balance_blocks_by_stage([gpu, cpu]) == [7, 1]
    assert balance_blocks_by_stage([gpu, gpu]) == [4, 4]


def test_balance_by_stage_is_optimal_against_brute_force() -> None:
    import itertools
    import random

    rng = random.Random(1)
    for _ in range(40):
        n = rng.randint(2, 7)
        s = rng.randint(1, n)
        table = [[rng.random() for _ in range(n)] for _ in range(s)]
        got = balance_blocks_by_stage(table)
        assert sum(got) == n and min(got) >= 1

        def bottleneck(sizes: list[int], table: list[list[float]] = table) -> float:
            out, i = 0.0, 0
            for stage, k in enumerate(sizes):
                out, i = max(out, sum(table[stage][i : i + k])), i + k
            return out

        best = min(
            bottleneck([b - a for a, b in zip((0, *cuts), (*cuts, n), strict=True)])
            for cuts in itertools.combinations(range(1, n), s - 1)
        )
        assert bottleneck(got) == pytest.approx(best, abs=1e-12)
