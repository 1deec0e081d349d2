"""The asynchronous pipeline schedules as pure functions: the 1F1B order, PipeDream's
weight versions (the paper's staleness S - s - 1 at stage s, the backward's version equal
to its forward's, at most S - s versions stashed) and 2BW's (every micro-batch of step t
on W(t - 1), one update to W(t + 1), never more than the shadow stored), checked by
replaying the actions against a model of the store."""

from __future__ import annotations

import pytest

from dtjob_trainer.strategies.pipedream_schedule import (
    Action,
    Op,
    one_f_one_b_order,
    pipedream_actions,
    two_bw_actions,
)

SHAPES = [(1, 1), (2, 1), (2, 4), (3, 2), (4, 4), (4, 8), (3, 7)]


def replay(actions: list[Action], live: int, store: set[int]) -> tuple[int, int]:
    """Run `actions` against a model of the driver: STASH copies the live version only,
    F and B use stored versions only, a backward follows its forward with the same
    version. Returns the live version at the end and the peak number of stored versions."""
    forward: dict[int, int] = {}
    peak = len(store)
    for a in actions:
        if a.op == Op.STASH:
            assert a.version == live and a.version not in store
            store.add(a.version)
        elif a.op == Op.DROP:
            store.remove(a.version)
        elif a.op == Op.FORWARD:
            assert a.version in store and a.microbatch not in forward
            forward[a.microbatch] = a.version  # type: ignore[index]
        elif a.op == Op.BACKWARD:
            assert a.version in store
            assert forward.pop(a.microbatch) == a.version  # type: ignore[arg-type]
        else:
            assert a.version == live + 1
            live = a.version
        peak = max(peak, len(store))
    assert not forward, "a forward without its backward"
    return live, peak


@pytest.mark.parametrize(("stages", "m"), SHAPES)
def test_1f1b_order(stages: int, m: int) -> None:
    for s in range(stages):
        order = one_f_one_b_order(stages, s, m)
        assert sorted(order) == sorted(
            [(Op.FORWARD, i) for i in range(m)] + [(Op.BACKWARD, i) for i in range(m)]
        )
        forwards = [i for op, i in order if op == Op.FORWARD]
        backwards = [i for op, i in order if op == Op.BACKWARD]
        assert forwards == backwards == list(range(m))
        # Warm-up: S - s forwards (fewer if the step has fewer), then B and F alternate.
        warm = min(stages - s, m)
        assert [op for op, _ in order[:warm]] == [Op.FORWARD] * warm
        in_flight = 0
        for op, _ in order:
            in_flight += 1 if op == Op.FORWARD else -1
            assert 0 <= in_flight <= stages - s
    assert one_f_one_b_order(2, 1, 3) == [
        (Op.FORWARD, 0), (Op.BACKWARD, 0), (Op.FORWARD, 1), (Op.BACKWARD, 1),
        (Op.FORWARD, 2), (Op.BACKWARD, 2),
    ]  # fmt: skip


@pytest.mark.parametrize(("stages", "m"), SHAPES)
def test_pipedream_versions_and_stash(stages: int, m: int) -> None:
    for s in range(stages):
        live, store = 0, set[int]()
        for step in range(3):
            actions = pipedream_actions(stages, s, m, step)
            live, peak = replay(actions, live, store)
            assert live == (step + 1) * m and not store, "drained: no stash between steps"
            assert peak <= min(stages - s, m)
            fwd = {a.microbatch: a.version for a in actions if a.op == Op.FORWARD}
            # The paper's staleness: micro-batch i's forward at stage s sees the updates of
            # micro-batches up to i - (S - s) of the step.
            assert fwd == {i: step * m + max(0, i - (stages - s) + 1) for i in range(m)}
            updates = [a for a in actions if a.op == Op.UPDATE]
            assert [a.microbatch for a in updates] == list(range(m))
            # An update follows its micro-batch's backward at once.
            for i, a in enumerate(actions):
                if a.op == Op.UPDATE:
                    prev = [b for b in actions[:i] if b.op == Op.BACKWARD][-1]
                    assert prev.microbatch == a.microbatch


def test_pipedream_last_stage_is_never_stale() -> None:
    actions = pipedream_actions(4, 3, 6, step=2)
    fwd = [a.version for a in actions if a.op == Op.FORWARD]
    assert fwd == [12, 13, 14, 15, 16, 17]
    first = pipedream_actions(4, 0, 6, step=0)
    assert [a.version for a in first if a.op == Op.FORWARD] == [0, 0, 0, 0, 1, 2]


@pytest.mark.parametrize(("stages", "m"), [(2, 2), (2, 4), (3, 3), (4, 8)])
def test_two_bw_delayed_update(stages: int, m: int) -> None:
    for s in range(stages):
        live, store = 0, set[int]()
        for step in range(4):
            actions = two_bw_actions(stages, s, m, step)
            live, peak = replay(actions, live, store)
            assert live == step + 1
            assert store == {step}, "the shadow for the next step: W(t)"
            assert peak <= 2, "two weight buffers: the shadow and the newest stash"
            used = {a.version for a in actions if a.op in (Op.FORWARD, Op.BACKWARD)}
            assert used == {max(step - 1, 0)}
            assert [a for a in actions if a.op == Op.UPDATE] == [Action(Op.UPDATE, None, step + 1)]
            assert actions[-1].op == Op.UPDATE


def test_two_bw_resumes_from_the_shadow() -> None:
    # Restarted at step 5 with the shadow W(4) restored: no stash of W(4) is needed.
    store = {4}
    live, peak = replay(two_bw_actions(2, 0, 2, 5), 5, store)
    assert live == 6 and store == {5} and peak == 2


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError):
        one_f_one_b_order(2, 2, 4)
    with pytest.raises(ValueError):
        pipedream_actions(2, 0, 0, 0)
