"""The stall line is a contract between the trainer, which prints it before a stuck rank's
stacks, and the operator, which cuts the pods' logs at it: both spell it the same way."""

from __future__ import annotations

from dtjob_operator.policies import stall_stacks
from dtjob_trainer import heartbeat


def test_the_operator_finds_the_line_the_trainer_prints() -> None:
    assert stall_stacks.STALL_LINE_PATTERN.pattern == heartbeat.STALL_LINE_PATTERN.pattern
    assert stall_stacks.STALL_LINE_PATTERN.flags == heartbeat.STALL_LINE_PATTERN.flags
    line = heartbeat.stall_line(3, 1200, 612.4)
    found = stall_stacks.STALL_LINE_PATTERN.search(f"step 1199\n{line}\nThread 0x1 ...\n")
    assert found is not None and found.group("rank", "step", "seconds") == ("3", "1200", "612")
