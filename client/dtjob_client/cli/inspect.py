"""Commands that look into a job: logs, why, queue, plot."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import click

from dtjob_client.cli.common import (
    all_namespaces_option,
    client_from,
    connection_options,
    dump,
    format_option,
)
from dtjob_client.errors import DtjobError
from dtjob_client.render.chart import format_chart
from dtjob_client.render.png import write_png
from dtjob_client.render.queue_text import format_queue
from dtjob_client.render.why_text import format_why


@click.command()
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Stream every pod's log until they end.")
@click.option("--role", type=click.Choice(["worker", "stage", "ps"]), help="Only this role.")
@connection_options
@click.pass_context
def logs(ctx: click.Context, name: str, follow: bool, role: str | None, namespace: str | None,
         kubeconfig: str | None, context: str | None) -> None:  # fmt: skip
    """Logs of every pod of the job's current gang, prefixed [<role>-<index>]."""
    c = client_from(ctx, namespace, kubeconfig, context)
    seen = failed = 0
    for line in c.logs(name, role=role, follow=follow):
        seen += 1
        if line.error:
            failed += 1
            click.echo(f"[{line.member}] error: {line.text}", err=True)
        else:
            click.echo(str(line))
    if not seen:
        which = f" of role {role}" if role else ""
        phase = c.get(name).status.phase
        raise DtjobError(f"job {name} has no pods{which} now (phase {phase})")
    if failed == seen:
        raise DtjobError(f"no logs from any pod of job {name}")


@click.command()
@click.argument("name")
@format_option("json", "yaml")
@connection_options
@click.pass_context
def why(ctx: click.Context, name: str, output: str | None, namespace: str | None,
        kubeconfig: str | None, context: str | None) -> None:  # fmt: skip
    """Why a job is (not) running: queue position, quota numbers, pods, events."""
    explanation = client_from(ctx, namespace, kubeconfig, context).why(name)
    if output:
        click.echo(dump(dataclasses.asdict(explanation), output), nl=False)
    else:
        click.echo(format_why(explanation), nl=False)


@click.command()
@format_option("json", "yaml")
@all_namespaces_option
@connection_options
@click.pass_context
def queue(ctx: click.Context, output: str | None, all_namespaces: bool, namespace: str | None,
          kubeconfig: str | None, context: str | None) -> None:  # fmt: skip
    """Jobs waiting for admission, in admission order, with their quotas."""
    c = client_from(ctx, namespace, kubeconfig, context)
    view = c.queue(all_namespaces)
    if output:
        doc: dict[str, Any] = {
            "jobs": [
                {
                    "namespace": j.namespace,
                    "name": j.name,
                    "position": j.status.queuePosition,
                    "gpus": j.gpus,
                    "phase": j.status.phase,
                    "reason": j.status.reason,
                }
                for j in view.jobs
            ],
            "quotas": {ns: [dataclasses.asdict(q) for q in qs] for ns, qs in view.quotas.items()},
        }
        click.echo(dump(doc, output), nl=False)
        return
    click.echo(format_queue(view, datetime.now(UTC), all_namespaces, c.namespace), nl=False)


@click.command()
@click.argument("name")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False),
              help="Write a PNG here (plot extra) instead of the terminal plot.")  # fmt: skip
@click.option("--width", type=int, default=60, show_default=True, help="Terminal plot columns.")
@click.option("--height", type=int, default=15, show_default=True, help="Terminal plot rows.")
@connection_options
@click.pass_context
def plot(ctx: click.Context, name: str, output: str | None, width: int, height: int,
         namespace: str | None, kubeconfig: str | None, context: str | None) -> None:  # fmt: skip
    """The job's loss curve, in the terminal or as a PNG."""
    c = client_from(ctx, namespace, kubeconfig, context)
    history = c.progress_history(name)
    if output:
        n = write_png(history, output, title=name)
        click.echo(f"wrote {output} ({n} points)")
    else:
        click.echo(format_chart(history, name, width=max(10, width), height=max(3, height)),
                   nl=False)  # fmt: skip


COMMANDS = [logs, why, queue, plot]
