"""A pass that creates nothing builds no pod (plan_state.gang_members): the gang's member
names from the rank layout alone are exactly the names of the pods build_pods would make,
for every example job of every strategy, whatever the gang generation."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtjob_operator.builders import Job, build_pods
from dtjob_operator.envcontract import rank_layout
from dtjob_operator.naming import pod_name
from dtjob_operator.settings import OperatorSettings
from helpers.examples import load_job

EXAMPLES = sorted(
    p for p in (Path(__file__).resolve().parents[3] / "examples").rglob("*.yaml")
    if "DistributedTrainingJob" in p.read_text()
)  # fmt: skip


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_member_names_are_the_built_pods_names(path: Path) -> None:
    obj = load_job(path)
    obj["metadata"].update(namespace="ns", uid="u")
    job = Job.from_object(obj)
    names = [pod_name(job.name, s.role, s.index) for s in rank_layout(job.spec).slots]
    for generation in (0, 3):
        built = build_pods(job, generation, OperatorSettings())
        assert [m["metadata"]["name"] for m in built] == names
