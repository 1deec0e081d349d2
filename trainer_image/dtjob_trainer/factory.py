"""Importing and calling the user's factories (trainer.model.factory,
trainer.dataset.factory): "package.module:callable", looked up with trainer.codePath first
on sys.path, so that code from a mounted volume (a ConfigMap) wins over the image's.

Whatever goes wrong inside the user's code, at import or in the call, is a ConfigError
(exit 2) whose message names the field and carries the code's own error: the operator
ends the job with it instead of restarting the gang, since a restart cannot fix the code.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

from dtjob_trainer.errors import ConfigError


def _on_path(code_path: str | None) -> None:
    if code_path and code_path not in sys.path:
        sys.path.insert(0, code_path)


def load_factory(field: str, factory: str, code_path: str | None) -> Callable[..., Any]:
    """The callable named by `factory` ("package.module:callable"); `field` names the spec
    field in errors, e.g. "trainer.model.factory"."""
    _on_path(code_path)
    module_name, _, attr = factory.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any failure of the user's code is theirs
        where = f" (trainer.codePath {code_path})" if code_path else ""
        raise ConfigError(
            f"{field}: cannot import {module_name}{where}: {type(exc).__name__}: {exc}"
        ) from exc
    target = getattr(module, attr, None)
    if not callable(target):
        raise ConfigError(f"{field}: {module_name} has no callable {attr!r}")
    return target  # type: ignore[no-any-return]


def call_factory(
    field: str, factory: str, kwargs: Mapping[str, Any] | None, code_path: str | None
) -> Any:
    """Import `factory` and call it with `kwargs`; any exception becomes a ConfigError
    naming `field` with the factory's own message."""
    target = load_factory(field, factory, code_path)
    try:
        return target(**dict(kwargs or {}))
    except Exception as exc:  # see the module docstring
        raise ConfigError(f"{field}: {factory} raised {type(exc).__name__}: {exc}") from exc
