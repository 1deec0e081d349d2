"""Commands that create, list and change jobs: submit, get, top, wait, suspend, resume,
delete."""

from __future__ import annotations

import shlex
import sys
import time
from datetime import UTC, datetime
from typing import Any

import click

from dtjob_api.spec import StrategyType
from dtjob_client.cli.common import (
    all_namespaces_option,
    as_list,
    client_from,
    connection_options,
    dump,
    format_option,
)
from dtjob_client.errors import DtjobError
from dtjob_client.render.jobs import format_jobs, format_top

KIND = "distributedtrainingjob.dtjob.io"
# Strategies whose pods are pipeline stages; the others' are workers.
STAGE_STRATEGIES = ("Pipeline", "ModelParallel", "Hybrid")


@click.command()
@click.option("-f", "--filename", type=click.Path(dir_okay=False), help="A job manifest (YAML).")
@click.option("--name", help="Job name (required without -f; overrides the manifest's).")
@click.option(
    "--strategy", type=click.Choice([s.value for s in StrategyType]), default="DataParallel",
    show_default=True, help="spec.strategy.type (without -f).",
)  # fmt: skip
@click.option("--workers", type=int, default=1, show_default=True,
              help="Pods (workers, or stages for Pipeline/ModelParallel/Hybrid).")  # fmt: skip
@click.option("--ps", type=int, help="Parameter-server pods (ParameterServer).")
@click.option("--gpus", type=int, default=0, show_default=True, help="GPUs per pod.")
@click.option("--cpu", help="CPU per pod, e.g. 500m.")
@click.option("--memory", help="Memory per pod, e.g. 1Gi.")
@click.option("--steps", type=int, help="trainer.steps of the bundled trainer.")
@click.option("--image", help="A custom trainer image (with --command).")
@click.option("--command", "command_line", help="The custom image's command, one string.")
@click.option("--dry-run", is_flag=True, help="Validate and print the manifest; send nothing.")
@format_option("json", "yaml")
@connection_options
@click.pass_context
def submit(ctx: click.Context, filename: str | None, name: str | None, strategy: str,
           workers: int, ps: int | None, gpus: int, cpu: str | None, memory: str | None,
           steps: int | None, image: str | None, command_line: str | None, dry_run: bool,
           output: str | None, namespace: str | None, kubeconfig: str | None,
           context: str | None) -> None:  # fmt: skip
    """Create a job from a manifest (-f) or from flags."""
    from dtjob_client.jobs import load_manifest

    if filename:
        manifest = load_manifest(filename, name)
    else:
        if not name:
            raise click.UsageError("give -f FILE, or --name with the job's flags")
        manifest = load_manifest(
            _from_flags(strategy, workers, ps, gpus, cpu, memory, steps, image, command_line),
            name,
        )
    if dry_run:
        click.echo(dump(manifest, output or "yaml"), nl=False)
        return
    job = client_from(ctx, namespace, kubeconfig, context).submit(manifest, namespace=namespace)
    if output:
        click.echo(dump(dict(job.raw), output), nl=False)
    else:
        click.echo(f"{KIND}/{job.name} created")


def _from_flags(strategy: str, workers: int, ps: int | None, gpus: int, cpu: str | None,
                memory: str | None, steps: int | None, image: str | None,
                command_line: str | None) -> dict[str, Any]:  # fmt: skip
    role: dict[str, Any] = {"replicas": workers, "gpus": gpus}
    if cpu:
        role["cpu"] = cpu
    if memory:
        role["memory"] = memory
    roles = {"stage" if strategy in STAGE_STRATEGIES else "worker": role}
    if ps:
        roles["ps"] = {"replicas": ps, **({"cpu": cpu} if cpu else {})}
    trainer: dict[str, Any] = {}
    if steps:
        trainer["steps"] = steps
    if image:
        trainer["image"] = image
    if command_line:
        trainer["command"] = shlex.split(command_line)
    return {"spec": {"strategy": {"type": strategy}, "roles": roles, "trainer": trainer}}


@click.command()
@click.argument("names", nargs=-1)
@format_option("json", "yaml", "wide")
@all_namespaces_option
@connection_options
@click.pass_context
def get(ctx: click.Context, names: tuple[str, ...], output: str | None, all_namespaces: bool,
        namespace: str | None, kubeconfig: str | None, context: str | None) -> None:  # fmt: skip
    """List jobs with their progress (or show the named ones)."""
    c = client_from(ctx, namespace, kubeconfig, context)
    jobs = [c.get(n) for n in names] if names else c.list(all_namespaces)
    if output in ("json", "yaml"):
        raw = [dict(j.raw) for j in jobs]
        click.echo(dump(raw[0] if len(names) == 1 else as_list(raw), output), nl=False)
        return
    if not jobs:
        where = "any namespace" if all_namespaces else f"namespace {c.namespace}"
        click.echo(f"No resources found in {where}.", err=True)
        return
    now = datetime.now(UTC)
    click.echo(format_jobs(jobs, now, wide=output == "wide", all_namespaces=all_namespaces),
               nl=False)  # fmt: skip


@click.command()
@click.option(
    "--interval", type=float, default=2.0, show_default=True, help="Seconds between refreshes."
)
@click.option(
    "--count", type=int, help="Refresh this many times, then exit (default: until Ctrl-C)."
)
@all_namespaces_option
@connection_options
@click.pass_context
def top(ctx: click.Context, interval: float, count: int | None, all_namespaces: bool,
        namespace: str | None, kubeconfig: str | None, context: str | None) -> None:  # fmt: skip
    """Jobs by activity, refreshed: running ones first, by throughput."""
    c = client_from(ctx, namespace, kubeconfig, context)
    shown = 0
    try:
        while count is None or shown < count:
            if shown:
                time.sleep(interval)
            jobs = c.list(all_namespaces)
            notes = c.rank_notes(jobs)
            text = format_top(jobs, datetime.now(UTC), all_namespaces, notes)
            if sys.stdout.isatty():
                click.clear()
            click.echo(text, nl=False)
            shown += 1
    except KeyboardInterrupt:
        return  # Ctrl-C is how top ends


@click.command()
@click.argument("name")
@click.option("--for", "phases", default="Succeeded,Failed", show_default=True,
              help="Phase(s) to wait for, comma-separated (e.g. --for=Succeeded).")  # fmt: skip
@click.option("--timeout", default="0", help="Give up after this long (30s, 10m, 1h; 0: never).")
@connection_options
@click.pass_context
def wait(ctx: click.Context, name: str, phases: str, timeout: str, namespace: str | None,
         kubeconfig: str | None, context: str | None) -> None:  # fmt: skip
    """Wait until a job reaches a phase; exit 1 on timeout or if it ends in another one."""
    wanted = [p.strip() for p in phases.split(",") if p.strip()]
    seconds = parse_duration(timeout)
    c = client_from(ctx, namespace, kubeconfig, context)
    job = c.wait(name, wanted, timeout=seconds or None)
    click.echo(f"{KIND}/{job.name} condition met: phase {job.status.phase}")


def parse_duration(text: str) -> float:
    """`90`, `90s`, `10m`, `1h` (kubectl's --timeout) in seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise DtjobError(f"--timeout: not a duration: {text!r} (use e.g. 30s, 10m, 1h)") from None


def _changer(verb: str, done: str) -> click.Command:
    @click.command(name=verb)
    @click.argument("name")
    @connection_options
    @click.pass_context
    def command(ctx: click.Context, name: str, namespace: str | None, kubeconfig: str | None,
                context: str | None) -> None:  # fmt: skip
        c = client_from(ctx, namespace, kubeconfig, context)
        action: Any = getattr(c, verb)
        action(name)
        click.echo(f"{KIND}/{name} {done}")

    command.help = {
        "suspend": "Suspend a job: its pods stop (rank 0 checkpoints), the job is kept.",
        "resume": "Resume a suspended job from its last checkpoint.",
        "delete": "Delete a job and everything it owns.",
    }[verb]
    return command


COMMANDS = [submit, get, top, wait, _changer("suspend", "suspended"),
            _changer("resume", "resumed"), _changer("delete", "deleted")]  # fmt: skip
