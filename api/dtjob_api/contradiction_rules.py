"""Cross-field rules for specs that could never run and settings that contradict each other
(rules.py adds them to RULES: CEL in the CRD and Python in the operator).

- nccl with a role whose pods have no GPU: every rank of an NCCL group needs its own GPU,
  so the CPU pods' processes fail at init, after the whole gang was admitted and started;
- a gpuResource named while the role asks for no GPU: the pods would quietly run on CPU
  (the name is only ever requested with gpus > 0);
- an exit code listed both retryable and permanent: which one wins would be a guess.
"""

from __future__ import annotations

from dtjob_api.resource_names import DEFAULT_GPU_RESOURCE
from dtjob_api.rule import Rule

_RUN = "self.runPolicy"


def _has_gpus(role: str) -> str:
    """CEL: the role's pods get a GPU (stage groups: any of them)."""
    r = f"self.roles.{role}"
    if role == "stage":
        return f"({r}.gpus > 0 || (has({r}.groups) && {r}.groups.exists(g, g.gpus > 0)))"
    return f"{r}.gpus > 0"


def _gpu_resource_needs_gpus(role: str) -> Rule:
    r = f"self.roles.{role}"
    return Rule(
        f"roles.{role}.gpuResource",
        f'has({r}) && {r}.gpuResource != "{DEFAULT_GPU_RESOURCE}"',
        lambda f: True,
        _has_gpus(role), lambda f: role not in f.gpuResourceWithoutGpus,
        "names a GPU while gpus is 0 (the pods would run on CPU): set gpus or remove it",
    )  # fmt: skip


def _cel_every_role_has_gpus() -> str:
    roles = ("worker", "ps", "stage")
    return " && ".join(f"(!has(self.roles.{r}) || {_has_gpus(r)})" for r in roles)


CONTRADICTION_RULES: tuple[Rule, ...] = (
    Rule(
        "strategy.backend",
        'self.strategy.backend == "nccl"', lambda f: f.backend == "nccl",
        _cel_every_role_has_gpus(), lambda f: not f.cpuRoles,
        "nccl needs a GPU in every pod (a role has gpus 0): set gpus, or use auto or gloo",
        detail="roles without GPUs: {cpuRoles}",
    ),
    *(_gpu_resource_needs_gpus(role) for role in ("worker", "ps", "stage")),
    Rule(
        "runPolicy.permanentExitCodes",
        f"has({_RUN}.retryableExitCodes) && has({_RUN}.permanentExitCodes)",
        lambda f: True,
        f"!{_RUN}.retryableExitCodes.exists(c, c in {_RUN}.permanentExitCodes)",
        lambda f: not f.exitCodesInBoth,
        "an exit code may not also be in runPolicy.retryableExitCodes: remove it from one",
        detail="in both: {exitCodesInBoth}",
    ),
)  # fmt: skip
