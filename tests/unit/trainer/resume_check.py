"""The second half of every SIGTERM + restart test: the restarted launch must resume at the
checkpoint's step and end where single-process training does (fp64)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unit.trainer.harness import Outcome, launch
from unit.trainer.reference import assert_losses_close, assert_params_close, reference_run


def resume_equals_reference(spec: dict[str, Any], workdir: Path, stopped_at: int) -> Outcome:
    """Launch `spec` again in `workdir` (it finds the checkpoint of step `stopped_at`) and
    compare its losses from that step on, and its final parameters, with single-process
    training of the whole run."""
    resumed = launch(spec, workdir)
    assert resumed.rc == 0, resumed.output
    assert resumed.result is not None
    assert resumed.result["start_step"] == stopped_at
    assert resumed.result["steps"] == spec["trainer"]["steps"]
    ref = reference_run(spec)
    assert_losses_close(resumed.result["losses"], ref.losses[stopped_at:], "fp64")
    assert_params_close(resumed.result["params"], ref.params, "fp64")
    return resumed
