"""Deterministic names of a job's children.

Names are derived from the job name alone, so a reconcile after an operator restart finds
the objects it created before (creation is idempotent: a 409 means "already there"), and
every pod has the stable DNS name `<job>-<role>-<index>.<job>.<namespace>.svc`.
"""


def service_name(job: str) -> str:
    """The headless Service; also the pods' subdomain."""
    return job


def pod_name(job: str, role: str, index: int) -> str:
    """The pod of one role index; also its hostname."""
    return f"{job}-{role}-{index}"


def pod_dns_name(job: str, namespace: str, role: str, index: int) -> str:
    """The pod's DNS name through the headless Service (resolvable before it is ready)."""
    return f"{pod_name(job, role, index)}.{service_name(job)}.{namespace}.svc"


def config_map_name(job: str) -> str:
    """The ConfigMap holding the job config (key config.json, mounted as DTJ_CONFIG)."""
    return f"{job}-config"


def progress_config_map_name(job: str) -> str:
    """The ConfigMap rank 0 writes its progress into (key progress.json)."""
    return f"{job}-progress"


def history_config_map_name(job: str) -> str:
    """The ConfigMap rank 0 writes the bounded loss history into (key history.json)."""
    return f"{job}-history"


def stalls_config_map_name(job: str) -> str:
    """The ConfigMap the operator keeps a stalled gang's stacks in (key stacks.txt)."""
    return f"{job}-stalls"


def service_account_name(job: str) -> str:
    """The ServiceAccount the job's pods run as."""
    return f"{job}-trainer"


def role_name(job: str) -> str:
    """The RBAC Role allowing get/patch of the progress and history ConfigMaps only."""
    return f"{job}-progress"


def role_binding_name(job: str) -> str:
    """The RoleBinding of that Role to the job's ServiceAccount."""
    return f"{job}-progress"


def network_policy_name(job: str) -> str:
    """The NetworkPolicy admitting traffic to the job's pods only from its own pods."""
    return f"{job}-peers"
