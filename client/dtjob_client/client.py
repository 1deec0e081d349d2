"""`Client`: submit, inspect, wait for, follow and explain DistributedTrainingJobs from
Python (a notebook, a pipeline step) or through `kubectl dtj`.

    from dtjob_client import Client
    c = Client(namespace="team-a")
    job = c.submit("examples/cpu/data-parallel.yaml")
    c.wait(job.name, "Succeeded", timeout=900)
    print(c.progress_history(job.name).losses[-1])
"""

from __future__ import annotations

import builtins
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from dtjob_api import GROUP, PLURAL, VERSION
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.status import TERMINAL_PHASES
from dtjob_client.core_reads import config_map, items
from dtjob_client.errors import JobEndedInOtherPhase, JobNotFound, WaitTimeout
from dtjob_client.history import History, history_config_map, parse_history
from dtjob_client.jobs import Job, load_manifest
from dtjob_client.kube import connect, refused
from dtjob_client.logs import LogLine, read_logs
from dtjob_client.multikueue import where_note, with_managed_by
from dtjob_client.queueing import QueueView, queue_view
from dtjob_client.stalls import ranks_note
from dtjob_client.why import LABEL_ROLE, Why, current_gang, explain

JOB_LABEL = "dtjob.io/job-name"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
WATCH_CHUNK_SECONDS = 300  # one watch request at most this long; then re-read and re-watch


class Client:
    """A connection to one cluster, with a default namespace.

    `kubeconfig` and `context` work as kubectl's flags; without them: $KUBECONFIG, else the
    pod's service account when running in a pod, else ~/.kube/config. `namespace` defaults
    to the context's (or the pod's) namespace, else `default`.
    """

    def __init__(
        self,
        namespace: str | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
    ) -> None:
        self.api, default_ns = connect(kubeconfig, context)
        self.namespace = namespace or default_ns
        self._jobs = client.CustomObjectsApi(self.api)

    # --- jobs -----------------------------------------------------------------------------

    def submit(
        self,
        job: DistributedTrainingJobSpec | Mapping[str, Any] | str | Path,
        name: str | None = None,
        namespace: str | None = None,
    ) -> Job:
        """Create a job from a spec model (give `name`), a manifest dict or a YAML file path.

        dtjob_api's validation runs first: InvalidJob lists every wrong field and nothing is
        sent. A refusal by the API server (a CEL rule, a name taken, RBAC) raises ApiRefused
        with the server's message. The namespace is `namespace`, else the manifest's, else
        the client's.
        """
        manifest = load_manifest(job, name)
        ns = namespace or manifest["metadata"].get("namespace") or self.namespace
        manifest["metadata"]["namespace"] = ns
        manifest = with_managed_by(manifest, self._kueue_object, ns)
        try:
            created: dict[str, Any] = self._jobs.create_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, ns, PLURAL, manifest
            )
        except ApiException as exc:
            raise refused(exc) from None
        return Job.from_api(created)

    def _kueue_object(self, namespace: str | None, plural: str, name: str) -> Any:
        """A Kueue object, or None where it is absent, Kueue is not installed or the user
        may not read it (submit then sends the manifest as written)."""
        try:
            if namespace:
                return self._jobs.get_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, namespace, plural, name
                )
            return self._jobs.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name)
        except ApiException:
            return None

    def get(self, name: str, namespace: str | None = None) -> Job:
        """The job now; JobNotFound if there is none of that name."""
        return Job.from_api(self._raw(name, namespace or self.namespace))

    def list(
        self, all_namespaces: bool = False, namespace: str | None = None
    ) -> builtins.list[Job]:
        """Jobs of the namespace (or of every namespace), by namespace and name."""
        resp: Any
        try:
            if all_namespaces:
                resp = self._jobs.list_cluster_custom_object(GROUP, VERSION, PLURAL)
            else:
                ns = namespace or self.namespace
                resp = self._jobs.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
        except ApiException as exc:
            raise refused(exc) from None
        jobs = [Job.from_api(o) for o in resp.get("items", [])]
        return sorted(jobs, key=lambda j: (j.namespace, j.name))

    def delete(self, name: str, namespace: str | None = None) -> None:
        """Delete the job; its pods, Service and ConfigMaps go with it (owner references)."""
        ns = namespace or self.namespace
        try:
            self._jobs.delete_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, name, propagation_policy="Background"
            )
        except ApiException as exc:
            raise JobNotFound(name, ns) if exc.status == 404 else refused(exc) from None

    def suspend(self, name: str, namespace: str | None = None) -> Job:
        """Set spec.suspend: the operator deletes the pods (SIGTERM: rank 0 checkpoints)
        and keeps the job, phase Suspended."""
        return self._set_suspend(name, namespace or self.namespace, True)

    def resume(self, name: str, namespace: str | None = None) -> Job:
        """Clear spec.suspend: the job queues for admission again and resumes from its last
        checkpoint."""
        return self._set_suspend(name, namespace or self.namespace, False)

    # --- watching -------------------------------------------------------------------------

    def wait(
        self,
        name: str,
        phase: str | Iterable[str] = ("Succeeded", "Failed"),
        timeout: float | None = None,
        namespace: str | None = None,
    ) -> Job:
        """Block until the job's phase is one of `phase` and return it, following a watch
        (no polling). Raises WaitTimeout after `timeout` seconds, and JobEndedInOtherPhase
        when it ends in a terminal phase not asked for (e.g. Failed while waiting for
        Succeeded); both name the phase and the job's latest condition."""
        ns = namespace or self.namespace
        wanted = {phase} if isinstance(phase, str) else set(phase)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            obj = self._raw(name, ns)
            if (done := _settled(obj, wanted)) is not None:
                return done
            remaining = WATCH_CHUNK_SECONDS if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(_wait_message(obj, wanted, f"after {timeout:g}s"), _phase(obj))
            rv = obj["metadata"]["resourceVersion"]
            try:
                for event in watch.Watch().stream(  # type: ignore[no-untyped-call]
                    self._jobs.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL,
                    field_selector=f"metadata.name={name}", resource_version=rv,
                    timeout_seconds=max(1, int(min(remaining, WATCH_CHUNK_SECONDS))),
                    _request_timeout=min(remaining, WATCH_CHUNK_SECONDS) + 10,
                ):  # fmt: skip
                    if event["type"] == "DELETED":
                        raise JobNotFound(name, ns)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        obj = event["object"]
                        if (done := _settled(obj, wanted)) is not None:
                            return done
                    if deadline is not None and time.monotonic() >= deadline:
                        break
            except ApiException as exc:
                if exc.status != 410:  # 410: the resourceVersion is too old; read again
                    raise refused(exc) from None

    def logs(
        self, name: str, role: str | None = None, follow: bool = False, namespace: str | None = None
    ) -> Iterator[LogLine]:
        """Lines of every pod of the job's current gang (`str(line)` is `[worker-0] ...`),
        optionally of one role; with `follow`, all pods stream at once until they end."""
        ns = namespace or self.namespace
        self._raw(name, ns)  # JobNotFound before anything else
        pods = [p for p in self._pods(name, ns) if role is None or _role(p) == role]
        # CoreV1Api for its streaming reads, imported by this command alone (core_reads.py).
        return read_logs(client.CoreV1Api(self.api), ns, current_gang(pods), follow)

    def progress_history(self, name: str, namespace: str | None = None) -> History:
        """The loss history rank 0 recorded (ConfigMap `<job>-history`): typed points and the
        stride. Empty for a job that has none (an older job), not an error."""
        ns = namespace or self.namespace
        cm_name = history_config_map(name)
        try:
            cm = config_map(self.api, ns, cm_name)
        except ApiException as exc:
            if exc.status == 404:
                self._raw(name, ns)  # no history is fine; no job is not
                return History()
            raise refused(exc) from None
        return parse_history(cm.get("data"), where=f"ConfigMap {ns}/{cm_name}")

    def why(self, name: str, namespace: str | None = None) -> Why:
        """Why the job is where it is: phase, conditions, queue position and admission's
        message, the namespace's ResourceQuotas, pods' waiting reasons and the scheduler's
        messages, and recent Events about the job and its pods."""
        ns = namespace or self.namespace
        job = Job.from_api(self._raw(name, ns))
        try:
            events = items(self.api, "events", ns)
            quotas = items(self.api, "resourcequotas", ns)
        except ApiException as exc:
            raise refused(exc) from None
        pods = self._pods(name, ns)
        why = explain(job, pods, events, quotas, datetime.now(UTC), self._reported(name, ns))
        if (job.raw.get("spec") or {}).get("managedBy"):
            why = replace(why, where=where_note(job.raw, self._workloads(name, ns)))
        return why

    def _workloads(self, name: str, namespace: str) -> builtins.list[Mapping[str, Any]]:
        """The job's Kueue Workloads (none where Kueue is not installed or not readable)."""
        try:
            found: Any = self._jobs.list_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads",
                label_selector=f"{JOB_LABEL}={name}",
            )  # fmt: skip
        except ApiException:
            return []
        return list(found.get("items") or [])

    def rank_notes(self, jobs: Iterable[Job]) -> dict[tuple[str, str], str]:
        """For `top`: the started jobs whose trainer's heartbeats name a straggler or a rank
        that stopped stepping, with that rank's pod and node (one ConfigMap read per started
        job; the pods are listed only for the jobs that have such a rank)."""
        notes = {}
        for job in jobs:
            if str(job.status.phase) not in ("Running", "Starting", "Restarting"):
                continue
            reported = self._reported(job.name, job.namespace)
            if ranks_note(job, reported, []) is None:
                continue
            pods = self._pods(job.name, job.namespace)
            if note := ranks_note(job, reported, pods):
                notes[(job.namespace, job.name)] = note
        return notes

    def queue(self, all_namespaces: bool = False, namespace: str | None = None) -> QueueView:
        """Waiting jobs in admission order (per namespace) with their namespaces' quotas."""
        jobs = self.list(all_namespaces, namespace)
        try:
            where = None if all_namespaces else (namespace or self.namespace)
            quotas = items(self.api, "resourcequotas", where)
        except ApiException as exc:
            raise refused(exc) from None
        return queue_view(jobs, quotas)

    # --- helpers --------------------------------------------------------------------------

    def _raw(self, name: str, ns: str) -> dict[str, Any]:
        try:
            obj: dict[str, Any] = self._jobs.get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, ns, PLURAL, name
            )
        except ApiException as exc:
            raise JobNotFound(name, ns) if exc.status == 404 else refused(exc) from None
        return obj

    def _reported(self, name: str, ns: str) -> dict[str, Any] | None:
        """The trainer's own progress document (ConfigMap `<job>-progress`), which carries
        the ranks' heartbeat summary the status leaves out; None when it cannot be read (no
        report yet, or no right to read ConfigMaps): `why` says less, and nothing fails."""
        try:
            cm = config_map(self.api, ns, f"{name}-progress")
        except ApiException:
            return None
        try:
            value = json.loads((cm.get("data") or {}).get("progress.json") or "null")
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def _pods(self, name: str, ns: str) -> builtins.list[dict[str, Any]]:
        try:
            return items(self.api, "pods", ns, label_selector=f"{JOB_LABEL}={name}")
        except ApiException as exc:
            raise refused(exc) from None

    def _set_suspend(self, name: str, ns: str, suspend: bool) -> Job:
        try:
            obj: Any = self._jobs.patch_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, name, {"spec": {"suspend": suspend}}
            )
        except ApiException as exc:
            raise JobNotFound(name, ns) if exc.status == 404 else refused(exc) from None
        return Job.from_api(obj)


def _role(pod: Mapping[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE)


def _phase(obj: Mapping[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase") or "Pending")


def _settled(obj: Mapping[str, Any], wanted: set[str]) -> Job | None:
    """The job when it is in a wanted phase; raises when it ended in another one."""
    phase = _phase(obj)
    if phase in wanted:
        return Job.from_api(obj)
    if phase in TERMINAL_PHASES:
        raise JobEndedInOtherPhase(_wait_message(obj, wanted, "and will not change"), phase)
    return None


def _wait_message(obj: Mapping[str, Any], wanted: set[str], when: str) -> str:
    meta = obj.get("metadata") or {}
    job = f"job {meta.get('namespace')}/{meta.get('name')}"
    text = f"{job} is {_phase(obj)} {when}, not {' or '.join(sorted(wanted))}"
    conditions = (obj.get("status") or {}).get("conditions") or []
    if conditions:
        # The latest transition says most about where it is stuck (stable on ties).
        last = max(
            enumerate(conditions), key=lambda ic: (ic[1].get("lastTransitionTime", ""), ic[0])
        )[1]
        text += (
            f"; last condition: {last.get('type')}={last.get('status')} "
            f"{last.get('reason')}: {last.get('message', '')}"
        )
    return text
