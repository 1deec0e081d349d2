"""Why a running elastic job below its maximum has not grown (docs/admission.md, "Elastic
jobs"), from the job alone: what the admission waits for before it grows it. Pure."""

from __future__ import annotations

from datetime import timedelta

from dtjob_api.run_policy import ElasticPolicy
from dtjob_api.status import KUEUE_ADMITTED_MESSAGE
from dtjob_client.jobs import Job, parse_time


def growth_note(job: Job) -> str | None:
    """One line for `kubectl dtj why`; None for any other job."""
    st, spec, said = job.status, job.spec, job.status.elastic
    if spec is None or said is None or str(st.phase) != "Running":
        return None
    if not 0 < said.replicas < said.maxReplicas:
        return None
    head = f"runs at {said.replicas} of at most {said.maxReplicas} workers"
    admitted = next((c for c in st.conditions if c.type == "Admitted"), None)
    if admitted is not None and admitted.message.startswith(KUEUE_ADMITTED_MESSAGE):
        return (
            f"{head}, as Kueue admitted it (partial admission); it keeps that size until "
            "Kueue evicts it and admits it again: Kueue-admitted jobs do not grow"
        )
    if not spec.checkpoint.claimName:
        return (
            f"{head}; it does not grow without spec.checkpoint.claimName: a resize restarts "
            "the gang, and checkpoints kept in the pods would go with them"
        )
    policy = spec.runPolicy.elastic or ElasticPolicy()
    if said.resizes >= policy.maxResizes:
        return (
            f"{head}; it keeps that size: its {said.resizes} resizes reached "
            "runPolicy.elastic.maxResizes"
        )
    since = said.lastResizeTime or st.startTime
    after = since and parse_time(since) + timedelta(seconds=policy.cooldownSeconds)
    when = f", not before {after:%Y-%m-%dT%H:%M:%SZ}" if after else ""
    return (
        f"{head}; it grows once room for more has stayed free for "
        f"{policy.cooldownSeconds}s while nobody in namespace {job.namespace} waits{when}"
    )
