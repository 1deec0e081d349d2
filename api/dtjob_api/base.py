"""Shared pydantic configuration for the API models: camelCase on the wire, unknown
fields refused (a typo in a manifest is an error, not a silently ignored key)."""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of every API model: camelCase aliases, strict about unknown fields."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
        use_attribute_docstrings=True,
    )

    def to_api(self) -> dict[str, object]:
        """The object as it appears in a manifest: camelCase keys, unset optionals left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
