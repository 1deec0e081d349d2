"""What every `kubectl dtj` command shares: kubectl's connection flags (accepted before or
after the command name), building the Client, and -o json|yaml output."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import click
import yaml

from dtjob_client.client import Client

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Flags:
    """Connection flags given to the group (`kubectl dtj -n x get`)."""

    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None


def connection_options(f: F) -> F:
    """-n/--namespace, --kubeconfig, --context on a command."""
    f = click.option("--context", help="The kubeconfig context to use.")(f)
    f = click.option("--kubeconfig", help="Path to the kubeconfig file to use.")(f)
    return click.option("-n", "--namespace", help="The namespace (default: the context's).")(f)


def all_namespaces_option(f: F) -> F:
    """-A/--all-namespaces."""
    return click.option(
        "-A", "--all-namespaces", is_flag=True, help="List jobs across all namespaces."
    )(f)


def format_option(*choices: str) -> Callable[[F], F]:
    """-o/--output with kubectl's format names."""
    return click.option(
        "-o", "--output", "output", type=click.Choice(choices), help="Output format."
    )


def client_from(
    ctx: click.Context, namespace: str | None, kubeconfig: str | None, context: str | None
) -> Client:
    """The Client for this command; a command's own flags win over the group's."""
    flags: Flags = ctx.find_object(Flags) or Flags()
    return Client(
        namespace=namespace or flags.namespace,
        kubeconfig=kubeconfig or flags.kubeconfig,
        context=context or flags.context,
    )


def dump(obj: Any, output: str) -> str:
    """JSON (indented, as kubectl) or YAML."""
    if output == "json":
        return json.dumps(obj, indent=2, default=str) + "\n"
    return str(yaml.safe_dump(_plain(obj), sort_keys=False, default_flow_style=False))


def _plain(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj


def as_list(items: list[Any]) -> dict[str, Any]:
    """Several objects as kubectl prints them: a v1 List."""
    return {"apiVersion": "v1", "kind": "List", "items": items}
