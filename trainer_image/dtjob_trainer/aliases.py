"""tf.distribute strategy names the API accepts as aliases (the operator's
dtjob_api/aliases.py, kept equal by a contract test). The operator resolves them
before it writes the job config, so a pod never sees one; resolving them here too lets
`python -m dtjob_trainer launch` run a manifest written with a TF name."""

from __future__ import annotations

from typing import Any

# alias -> (strategy.type, parameterServer.mode or None)
TF_ALIASES: dict[str, tuple[str, str | None]] = {
    "MirroredStrategy": ("DataParallel", None),
    "MultiWorkerMirroredStrategy": ("DataParallel", None),
    "CentralStorageStrategy": ("CPUOffload", None),
    "ParameterServerStrategy": ("ParameterServer", "Async"),
}


def resolve_strategy(data: Any) -> Any:
    """spec.strategy (a dict as written) with an alias replaced by its target."""
    if not isinstance(data, dict) or data.get("type") not in TF_ALIASES:
        return data
    kind, mode = TF_ALIASES[data["type"]]
    out = {**data, "type": kind}
    if mode is not None:
        out.pop("parameter_server", None)
        out["parameterServer"] = {"mode": mode}
    return out
