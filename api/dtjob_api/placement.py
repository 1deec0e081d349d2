"""spec.placement: where the gang goes in the cluster's topology (racks, blocks, hosts),
named by the node labels that mark it. The built-in admission packs the gang
(operator/admission/topology.py); Kueue's Topology Aware Scheduling does for a job Kueue
admits (docs/kueue.md, "Topology").
"""

from typing import Any

from pydantic import ConfigDict, Field, model_validator

from dtjob_api.base import ApiModel

# A Kubernetes label key: an optional DNS-subdomain prefix and a name (IsQualifiedName).
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
ONE_LEVEL_MESSAGE = "set exactly one of required and preferred (a node label, e.g. a rack's)"
TOPOLOGY_CEL: list[Any] = [
    {"rule": "has(self.required) != has(self.preferred)", "message": ONE_LEVEL_MESSAGE},
]


class TopologySpec(ApiModel):
    """The topology level (a node label) the gang is packed into."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": TOPOLOGY_CEL})

    required: str | None = Field(default=None, max_length=316, pattern=LABEL_KEY_PATTERN)
    """Node label of a level: the whole gang in one domain of it, or it waits."""
    preferred: str | None = Field(default=None, max_length=316, pattern=LABEL_KEY_PATTERN)
    """Node label of a level: one domain of it if the gang fits, else as few as fit."""

    @model_validator(mode="after")
    def _one_level(self) -> "TopologySpec":
        if (self.required is None) == (self.preferred is None):
            raise ValueError(ONE_LEVEL_MESSAGE)
        return self

    @property
    def level(self) -> str:
        return str(self.required or self.preferred)


class PlacementSpec(ApiModel):
    """Where the gang's pods go."""

    topology: TopologySpec | None = None
    """Pack the gang into one rack, block or host (levels are node labels)."""
