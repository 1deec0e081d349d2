"""`kubectl dtj`: the kubectl plugin for DistributedTrainingJobs, built on the SDK.

Installed as the console script `kubectl-dtj` (kubectl runs any `kubectl-<name>` on PATH as
`kubectl <name>`); `python -m dtjob_client.cli` is the same. kubectl's conventions: -n,
-A, -o json|yaml|wide, --kubeconfig, --context; exit 0 on success and 1 on an error, with a
one-line `error: ...` on stderr and never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
from urllib3.exceptions import HTTPError

from dtjob_client.cli import inspect, jobs
from dtjob_client.cli.common import Flags
from dtjob_client.errors import DtjobError


@click.group(name="kubectl dtj", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-n", "--namespace", help="The namespace (default: the context's).")
@click.option("--kubeconfig", help="Path to the kubeconfig file to use.")
@click.option("--context", help="The kubeconfig context to use.")
@click.pass_context
def cli(
    ctx: click.Context, namespace: str | None, kubeconfig: str | None, context: str | None
) -> None:
    """Submit, watch, explain and plot DistributedTrainingJobs (dtjob.io)."""
    ctx.obj = Flags(namespace, kubeconfig, context)


for command in (*jobs.COMMANDS, *inspect.COMMANDS):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: run the command, turn every failure into one line and exit code 1."""
    try:
        code = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="kubectl dtj",
            standalone_mode=False,
        )
    except click.exceptions.Abort:
        sys.exit(130)  # Ctrl-C, as a shell reports SIGINT
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(1)
    except DtjobError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except HTTPError as exc:
        click.echo(f"error: cannot reach the Kubernetes API server: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # never a traceback: say what broke in one line
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
