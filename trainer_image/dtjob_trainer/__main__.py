"""Command line: `python -m dtjob_trainer run` (the container entrypoint) and
`python -m dtjob_trainer launch --nproc N <config>` (one machine, no Kubernetes)."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys

from dtjob_trainer.errors import EXIT_CONFIG, ConfigError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dtjob_trainer", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def run_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--result-file", help="rank 0 saves the run's result here (torch.save)")
        p.add_argument(
            "--verify-replicas",
            action="store_true",
            help="check after every step that replicated parameters are identical",
        )

    run = sub.add_parser("run", help="train as configured by the environment contract")
    run_flags(run)
    launch = sub.add_parser("launch", help="run a job locally with N processes")
    launch.add_argument("config", help="DistributedTrainingJob manifest or spec (YAML/JSON)")
    launch.add_argument("--nproc", type=int, help="total processes (resizes the main role)")
    launch.add_argument("--checkpoint-dir", help="replaces checkpoint.mountPath")
    launch.add_argument("--port", type=int, help="rendezvous port (default: a free one)")
    run_flags(launch)
    return parser


def _run_args(args: argparse.Namespace) -> list[str]:
    out = []
    if args.result_file:
        out += ["--result-file", os.path.abspath(args.result_file)]
    if args.verify_replicas:
        out.append("--verify-replicas")
    return out


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run it; returns the process exit code."""
    # `kill -USR1 <pid>` prints every thread's Python stack to stderr (the pod's log) and the
    # process goes on: where a hung gang waits (a collective, a checkpoint write), with no
    # debugger in the image. Forked processes inherit it; fd 2 whatever sys.stderr is.
    faulthandler.register(signal.SIGUSR1, file=2, all_threads=True)
    args = _parser().parse_args(argv)
    if args.command == "launch":
        logging.basicConfig(level=logging.INFO, format="[launch] %(levelname)s %(message)s")
        from dtjob_trainer.launch import launch

        try:
            return launch(
                args.config, args.nproc, args.checkpoint_dir, args.port, _run_args(args), os.environ
            )
        except ConfigError as exc:
            print(f"dtjob-trainer: invalid job config:\n{exc}", file=sys.stderr)
            return EXIT_CONFIG

    from dtjob_trainer.env import read_env

    try:
        env = read_env()
    except ConfigError as exc:
        print(f"dtjob-trainer: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(level=logging.INFO, format=f"[rank {env.rank}] %(levelname)s %(message)s")
    if env.local_world_size > 1 and not env.local_rank_set:
        from dtjob_trainer.procs import supervise, trainer_command

        # This process is the pod's supervisor: it starts one child per local rank with
        # the pod's environment plus LOCAL_RANK.
        base = dict(os.environ)
        children = [
            (trainer_command("run", *_run_args(args)), {**base, "LOCAL_RANK": str(i)})
            for i in range(env.local_world_size)
        ]
        return supervise(children)
    from dtjob_trainer.runner import run_process

    run_process(env, args.result_file, args.verify_replicas)


if __name__ == "__main__":
    sys.exit(main())
