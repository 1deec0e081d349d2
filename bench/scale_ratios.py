"""dtjob / Kubeflow ratios of bench/operator_scale.py's figures (pure): below 1, dtjob
took less time, CPU or memory than Kubeflow's training-operator for the same work."""

from __future__ import annotations

from typing import Any

# ratio name -> (part, figure): each compares the same figure of the same part.
RATIOS = {
    "burst_all_pods_running": ("burst", "all_pods_running_s"),
    "burst_cpu_s_per_1000_pods": ("burst", "operator_cpu_s_per_1000_pods"),
    "burst_cpu_s_per_1000_pods_to_idle": ("burst", "operator_cpu_s_per_1000_pods_to_idle"),
    "time_to_64_pods_p50": ("time_to_64_pods", "p50_s"),
    "memory_idle": ("memory", "rss_idle_mib"),
    "memory_with_jobs": ("memory", "rss_with_jobs_mib"),
}


def ratio(dtjob: float | None, kubeflow: float | None) -> float | None:
    """dtjob / kubeflow to 3 places; None when either is missing or Kubeflow's is 0."""
    if dtjob is None or kubeflow is None or kubeflow == 0:
        return None
    return round(dtjob / kubeflow, 3)


def ratios(dtjob: dict[str, Any], kubeflow: dict[str, Any]) -> dict[str, float | None]:
    """Every RATIOS entry of two operators' results (each {part: {figure: value}}); a part
    one of them did not run gives None."""
    return {
        name: ratio((dtjob.get(part) or {}).get(figure), (kubeflow.get(part) or {}).get(figure))
        for name, (part, figure) in RATIOS.items()
    }
