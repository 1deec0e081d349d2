"""The asynchronous pipeline schedules, PipeDream (1F1B with weight stashing) and
PipeDream-2BW, as a pure function: which micro-batch's forward or backward a stage runs
when, with which weight version, and when versions are stashed, dropped and created.

Both run the 1F1B order: stage s of S admits min(S - s, M) micro-batches (its warm-up),
then alternates one backward and one forward, then drains. The difference is the update:

- PipeDream updates the stage's weights after EVERY micro-batch's backward, without waiting
  for the other stages (no flush inside a step). A forward uses the newest version; weight
  stashing keeps that version until the same micro-batch's backward, so the gradient is the
  true gradient of the function the forward computed. Stage s runs ahead by S - s - 1
  updates at most; the last stage is never stale.
- PipeDream-2BW accumulates the gradients of a step's M micro-batches and applies them in
  ONE update delayed by a step: W(t+1) = W(t) - lr * grad f(W(t-1)) (Narayanan et al. 2021).
  Two buffers live: the newest W(t) (the optimizer's) and the shadow W(t-1) every forward
  and backward of step t computes with. W(-1) = W(0).

Versions are global integers. PipeDream: version v is the weights after v micro-batch
updates (M per step). 2BW: version t is W(t), the weights at the start of step t.

The pipeline drains at every step boundary (the step is the unit the training loop
checkpoints, stops and reports at), so no micro-batch is in flight between steps: a
PipeDream checkpoint holds no stash at all, a 2BW one holds the shadow buffer (the one
version that crosses steps by design). The drain costs the 1F1B bubble once per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Op(StrEnum):
    """What a stage does."""

    FORWARD = "F"
    BACKWARD = "B"
    STASH = "S"
    """Copy the live weights (which are at `version`) into the store."""
    DROP = "D"
    """Free the stored `version`: no pending forward or backward needs it."""
    UPDATE = "U"
    """Apply the gradients of `microbatch` (or, when it is None, the step's accumulated
    ones) to the live weights, which become `version`."""


@dataclass(frozen=True)
class Action:
    """One op of one stage; `version` is the weights it computes with (F, B), copies or
    frees (S, D) or creates (U)."""

    op: Op
    microbatch: int | None
    version: int


def one_f_one_b_order(num_stages: int, stage: int, microbatches: int) -> list[tuple[Op, int]]:
    """The forwards and backwards of `stage` in 1F1B order: min(S - stage, M) warm-up
    forwards (the micro-batches in flight that keep every stage busy), then one backward
    and one forward, then the remaining backwards."""
    _check(num_stages, stage, microbatches)
    warmup = min(num_stages - stage, microbatches)
    order = [(Op.FORWARD, m) for m in range(warmup)]
    for m in range(microbatches):
        order.append((Op.BACKWARD, m))
        if warmup + m < microbatches:
            order.append((Op.FORWARD, warmup + m))
    return order


def pipedream_actions(num_stages: int, stage: int, microbatches: int, step: int) -> list[Action]:
    """PipeDream with weight stashing, step `step`: an update after every backward, every
    forward with the newest version, its backward with the same (stashed) one."""
    version = step * microbatches  # the live weights when the step starts
    used_by: dict[int, int] = {}  # version -> micro-batches whose backward is pending
    forward_version: dict[int, int] = {}
    actions: list[Action] = []
    for op, m in one_f_one_b_order(num_stages, stage, microbatches):
        if op == Op.FORWARD:
            if version not in used_by:
                actions.append(Action(Op.STASH, None, version))
                used_by[version] = 0
            used_by[version] += 1
            forward_version[m] = version
            actions.append(Action(Op.FORWARD, m, version))
            continue
        v = forward_version.pop(m)
        actions.append(Action(Op.BACKWARD, m, v))
        used_by[v] -= 1
        # The newest version stays stashed while a later forward may still use it.
        if used_by[v] == 0 and v != version:
            actions.append(Action(Op.DROP, None, v))
            del used_by[v]
        version += 1
        actions.append(Action(Op.UPDATE, m, version))
        if used_by.get(version - 1) == 0:
            actions.append(Action(Op.DROP, None, version - 1))
            del used_by[version - 1]
    assert not used_by, "every stash is dropped by the end of the step"
    return actions


def two_bw_actions(num_stages: int, stage: int, microbatches: int, step: int) -> list[Action]:
    """PipeDream-2BW, step `step`: every forward and backward with the shadow W(step - 1)
    (W(0) at step 0), one update W(step) -> W(step + 1) with the accumulated gradient.

    The store holds the shadow between steps; at step 0 (or resuming from a checkpoint
    without one) it starts empty and version 0 is stashed first."""
    shadow = max(step - 1, 0)
    actions: list[Action] = []
    if step == 0:
        actions.append(Action(Op.STASH, None, 0))
    actions += [
        Action(op, m, shadow) for op, m in one_f_one_b_order(num_stages, stage, microbatches)
    ]
    if step > 0:  # W(step) becomes the next step's shadow; W(step - 1) is done with
        actions.append(Action(Op.STASH, None, step))
        actions.append(Action(Op.DROP, None, shadow))
    actions.append(Action(Op.UPDATE, None, step + 1))
    return actions


def _check(num_stages: int, stage: int, microbatches: int) -> None:
    if num_stages < 1 or not 0 <= stage < num_stages or microbatches < 1:
        raise ValueError(
            f"no schedule for stage {stage} of {num_stages} with {microbatches} micro-batches"
        )
