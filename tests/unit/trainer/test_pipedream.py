"""Acceptance of the asynchronous Pipeline schedules PipeDream and PipeDream2BW on CPU
over gloo (real stage processes, point-to-point sends).

- Weight stashing: every micro-batch's backward computes with the very weights its
  forward used (version and checksum recorded per micro-batch), although the stage's live
  weights moved on in between.
- Staleness 0 (one micro-batch a step: the pipeline flushes every step) equals
  single-process training (fp64, 1e-10).
- PipeDream with 4 micro-batches over 3 stages equals a single-process reference that
  applies the paper's per-stage staleness (fp64, 1e-10); 2BW equals the delayed update
  W(t+1) = W(t) - opt(grad f(W(t-1))) (fp64, 1e-10), with Adam so its state is on W(t).
- Sizes 2BW cannot run are config errors (exit 2) naming the field; Hybrid refuses them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from unit.trainer.harness import a_spec, launch
from unit.trainer.pipedream_reference import pipedream_reference, two_bw_reference
from unit.trainer.ranks import run_ranks
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run

from dtjob_api.spec import PipelineSchedule
from dtjob_trainer.config import load_config
from dtjob_trainer.data import batch, load_dataset
from dtjob_trainer.errors import EXIT_CONFIG, ConfigError
from dtjob_trainer.models import build_model, loss_fn, split_into_stages
from dtjob_trainer.strategies.pipedream import step_actions
from dtjob_trainer.strategies.pipedream_stage import PipeDreamStage, Trace
from dtjob_trainer.strategies.pipeline import make_plan

ADAM = {"type": "Adam", "lr": 0.01}


def async_spec(schedule: str, stages: int, microbatches: int, **trainer: Any) -> Any:
    """A Pipeline job of `stages` single-process stage pods (fp64 MLP, 4 blocks)."""
    extra = {"pipeline": {"schedule": schedule, "microbatches": microbatches}}
    return a_spec("Pipeline", workers=None, stages=stages, strategy_extra=extra, **trainer)


def traced_steps(rank: int, world: int, spec: dict[str, Any], steps: int) -> dict[str, Any]:
    """Rank body: `steps` steps of the stage driver with tracing on."""
    cfg = load_config(spec)
    p = cfg.pipeline
    module = split_into_stages(build_model(cfg, torch.float64), world)[rank]
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    driver = PipeDreamStage(module, rank, world, torch.device("cpu"), loss_fn, optimizer.step)
    data = load_dataset(cfg, torch.float64)
    traces = []
    for step in range(steps):
        driver.trace = Trace()
        x, y = batch(data, step, cfg.trainer.batchSize, cfg.trainer.seed)
        driver.run(
            step_actions(p.schedule, world, rank, p.microbatches, step), x, y, p.microbatches
        )
        traces.append(driver.trace)
    return {"traces": traces, "store": sorted(driver.store), "live": driver.live_version}


def test_backward_uses_the_weights_of_its_forward(tmp_path: Path) -> None:
    spec = async_spec("PipeDream", stages=3, microbatches=4)
    ranks = run_ranks(traced_steps, 3, spec, 2, workdir=tmp_path)
    for stage, r in enumerate(ranks):
        assert r["live"] == 8 and r["store"] == [], "drained at the step boundary"
        for step, trace in enumerate(r["traces"]):
            assert trace.updates == [step * 4 + i + 1 for i in range(4)]
            assert trace.forward == trace.backward  # same version, same weights
            assert trace.peak_versions <= 3 - stage
    # Stage 0: micro-batch 1's backward runs after the update of micro-batch 0 (live
    # weights at version 1), yet computes with version 0, whose weights differ from 1's.
    first = ranks[0]["traces"][0]
    assert first.backward[1][0] == 0 and first.forward[3][0] == 1
    assert first.backward[1][1] != first.forward[3][1]
    # The last stage is never stale: micro-batch i uses the weights after i updates.
    assert [ranks[2]["traces"][1].forward[i][0] for i in range(4)] == [4, 5, 6, 7]


def test_two_bw_micro_batches_share_the_shadow(tmp_path: Path) -> None:
    spec = async_spec("PipeDream2BW", stages=2, microbatches=4)
    ranks = run_ranks(traced_steps, 2, spec, 3, workdir=tmp_path)
    for r in ranks:
        assert r["live"] == 3 and r["store"] == [2], "W(t) kept as the next step's shadow"
        for step, trace in enumerate(r["traces"]):
            assert trace.updates == [step + 1]
            assert trace.forward == trace.backward
            assert {v for v, _ in trace.forward.values()} == {max(step - 1, 0)}
            assert len({c for _, c in trace.forward.values()}) == 1
            assert trace.peak_versions <= 2


def test_staleness_zero_equals_single_process(tmp_path: Path) -> None:
    # PipeDream with one micro-batch a step flushes every step: plain synchronous SGD.
    # (2BW is delayed by a step whatever the sizes: it has no such degenerate form.)
    spec = async_spec("PipeDream", stages=2, microbatches=1, steps=6)
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None and out.result["strategy"] == "Pipeline"
    ref = reference_run(spec)
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")


def test_pipedream_equals_the_stale_reference(tmp_path: Path) -> None:
    spec = async_spec("PipeDream", stages=3, microbatches=4, steps=6, optimizer=ADAM)
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    ref = pipedream_reference(spec, stages=3)
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")
    # The staleness matters: synchronous training on the same data ends elsewhere.
    sync = reference_run(spec)
    name = next(iter(sync.params))
    assert not torch.allclose(out.result["params"][name], sync.params[name], atol=1e-6)


def test_two_bw_equals_the_delayed_update(tmp_path: Path) -> None:
    spec = async_spec("PipeDream2BW", stages=2, microbatches=4, steps=6, optimizer=ADAM)
    out = launch(spec, tmp_path)
    assert out.rc == 0, out.output
    assert out.result is not None
    ref = two_bw_reference(spec)
    assert_losses_close(out.result["losses"], ref.losses, "fp64")
    assert_params_close(out.result["params"], ref.params, "fp64")
    # Steps 0 and 1 both compute on W(0): the same batch would give the same loss.
    assert out.result["losses"][0] == pytest.approx(reference_run(spec).losses[0], abs=1e-10)


def test_two_bw_needs_a_full_pipeline_exits_2(tmp_path: Path) -> None:
    out = launch(async_spec("PipeDream2BW", stages=2, microbatches=1), tmp_path)
    assert out.rc == EXIT_CONFIG, out.output
    assert "strategy.pipeline.microbatches" in out.output
    assert out.result is None


def test_hybrid_refuses_the_async_schedules() -> None:
    for schedule in (PipelineSchedule.PIPEDREAM, PipelineSchedule.PIPEDREAM_2BW):
        extra = {"pipeline": {"schedule": schedule}, "hybrid": {"dataParallel": 2}}
        spec = a_spec("Hybrid", workers=None, stages=4, strategy_extra=extra)
        with pytest.raises(ConfigError, match=r"^strategy\.pipeline\.schedule: ") as err:
            load_config(spec)
        assert err.value.exit_code == EXIT_CONFIG
        with pytest.raises(ValueError, match="its own driver"):
            make_plan(schedule, 4, 1, pp_size=2, pp_rank=0)
