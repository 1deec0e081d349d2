"""The job's headless Service: stable per-pod DNS names for rendezvous."""

from __future__ import annotations

from dtjob_operator.builders.job import Job, Manifest, child_metadata
from dtjob_operator.constants import LABEL_JOB_NAME, RENDEZVOUS_PORT_NAME
from dtjob_operator.naming import service_name


def build_service(job: Job) -> Manifest:
    """Headless Service selecting all of the job's pods.

    publishNotReadyAddresses: ranks resolve rank 0 while it is still starting (readiness
    would otherwise hide it until after rendezvous, which needs it: a deadlock)."""
    port = job.spec.network.masterPort
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(job, service_name(job.name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB_NAME: job.name},
            "ports": [
                {
                    "name": RENDEZVOUS_PORT_NAME,
                    "port": port,
                    "targetPort": port,
                    "protocol": "TCP",
                }
            ],
        },
    }
