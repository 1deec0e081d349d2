"""A stalled gang's stacks, cut from its pods' log tails before the restart deletes them
(policies/stall_stacks.py)."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob_operator.policies.stall_stacks import (
    MAX_PIECE_CHARS,
    MAX_PODS,
    pods_to_read,
    stacks_document,
    stall_piece,
)

LINE = "dtjob: rank 1 stalled at step 150 for 22s; stacks follow"
STACK = 'Thread 0x7f (most recent call first):\n  File "dtjob_trainer/fault.py", line 60 in fault\n'


def pod(name: str, first_rank: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {"dtjob.io/rank": str(first_rank)}}}


GANG = [pod(f"j-worker-{i}", i) for i in range(10)]


def test_the_culprits_pod_is_read_first_and_at_most_max_pods() -> None:
    progress = {"ranks": {"behind": [{"rank": 7}]}}
    assert (
        pods_to_read(progress, GANG)
        == ["j-worker-7", *[f"j-worker-{i}" for i in range(MAX_PODS) if i != 7]][:MAX_PODS]
    )
    assert pods_to_read(None, GANG) == [f"j-worker-{i}" for i in range(MAX_PODS)]
    assert pods_to_read({"ranks": {"behind": [{"rank": "x"}]}}, GANG[:2]) == [
        "j-worker-0",
        "j-worker-1",
    ]


@pytest.mark.parametrize(
    ("log", "piece"),
    [
        (f"step 140\nstep 150\n{LINE}\n{STACK}", f"{LINE}\n{STACK}".rstrip()),
        # Two episodes: the last one's stacks.
        (f"dtjob: rank 1 stalled at step 9 for 5s; stacks follow\nold\n{LINE}\n{STACK}",
         f"{LINE}\n{STACK}".rstrip()),
        ("step 140\nstep 150\n", None),  # no stall line: nothing to keep
        ("", None),
        (f"an echo of {LINE}", None),  # only a line of its own counts
    ],
)  # fmt: skip
def test_a_log_is_cut_at_its_last_stall_line(log: str, piece: str | None) -> None:
    assert stall_piece(log) == piece


def test_a_long_piece_is_cut_to_its_head() -> None:
    piece = stall_piece(f"{LINE}\n" + "x" * (2 * MAX_PIECE_CHARS))
    assert piece is not None and piece.startswith(LINE) and piece.endswith("[... cut]")
    assert len(piece) < MAX_PIECE_CHARS + 20


def test_the_document_has_the_sentence_then_each_pods_piece() -> None:
    text = stacks_document("training stalled: ...", [("j-worker-1", f"{LINE}\n{STACK}"),
                                                    ("j-worker-0", None)])  # fmt: skip
    assert text.startswith("training stalled: ...\n\n=== pod j-worker-1\n" + LINE)
    assert "=== pod j-worker-0\n(no stall line in the last lines of its log)" in text
