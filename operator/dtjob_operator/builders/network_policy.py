"""A NetworkPolicy per job: its pods accept traffic only from the job's own pods.

The rendezvous port (MASTER_PORT on rank 0), NCCL's and gloo's sockets and a parameter
server's port are otherwise reachable from any pod of the cluster. "Same job" cannot be
said by one namespace-wide policy (a selector cannot compare label values between pods),
hence one per job, owned by the job. It takes effect only where the cluster's network
plugin enforces NetworkPolicy; a pod of the same namespace that copies the job's label is
let in (labels are the only identity NetworkPolicy knows).
"""

from __future__ import annotations

from dtjob_operator.builders.job import Job, Manifest, child_metadata
from dtjob_operator.constants import LABEL_JOB_NAME
from dtjob_operator.naming import network_policy_name


def build_network_policy(job: Job) -> Manifest:
    """Ingress to the job's pods from the job's pods only, on any port; egress untouched."""
    own_pods = {"matchLabels": {LABEL_JOB_NAME: job.name}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": child_metadata(job, network_policy_name(job.name)),
        "spec": {
            "podSelector": own_pods,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": own_pods}]}],
        },
    }
