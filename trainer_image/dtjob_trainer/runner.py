"""One training process: contract -> config -> process group -> strategy -> exit code.

`run_process` never returns: it exits the process with the exit code of docs/env-contract.md
(0 success, 2 bad config, 143 SIGTERM, 200 rendezvous timeout, 201 peer lost, 1 anything
else); a failure also prints a one-line reason on stderr. SIGTERM before training starts
exits 143 at once (nothing to checkpoint); afterwards it sets `ctx.stop` and the loop
checkpoints and exits 143.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import traceback
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from dtjob_trainer.config import TrainerConfig, load_config
from dtjob_trainer.env import DistEnv
from dtjob_trainer.errors import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_PREEMPTED,
    ConfigError,
    PeerLost,
    TrainerError,
)

if TYPE_CHECKING:
    from dtjob_trainer.heartbeat import Heartbeat
    from dtjob_trainer.progress import ProgressReporter

log = logging.getLogger("dtjob_trainer")


def read_config_file(path: str) -> TrainerConfig:
    """Load and validate the job config at `path` (JSON)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"DTJ_CONFIG: cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"DTJ_CONFIG: {path} is not valid JSON: {exc}") from None
    return load_config(data)


def check_env_matches(env: DistEnv, cfg: TrainerConfig) -> TrainerConfig:
    """The config of the gang the contract describes. The config must describe it, except
    for an elastic job: its config is the spec (the most workers), and WORLD_SIZE says how
    many this gang has, anywhere from roles.worker.minReplicas to replicas pods."""
    if env.world_size == cfg.world_size():
        return cfg
    worker = cfg.roles.worker
    if worker is not None and worker.minReplicas is not None and cfg.roles.ps is None:
        pods, rest = divmod(env.world_size, worker.processes())
        if rest == 0 and worker.minReplicas <= pods <= worker.replicas:
            sized = worker.model_copy(update={"replicas": pods})
            roles = cfg.roles.model_copy(update={"worker": sized})
            return TrainerConfig(cfg.spec.model_copy(update={"roles": roles}))
    elastic = (
        f" (or, elastic, {worker.minReplicas} to {worker.replicas} pods of {worker.processes()})"
        if worker is not None and worker.minReplicas is not None
        else ""
    )
    raise ConfigError(
        f"environment variable WORLD_SIZE: {env.world_size}, but the config's roles give "
        f"{cfg.world_size()} processes{elastic}"
    )


def block_options(cfg: TrainerConfig) -> str:
    """The speed options applied to every model block, in words ("" when none)."""
    t = cfg.trainer
    names = [("activation checkpointing", t.activationCheckpointing), ("torch.compile", t.compile)]
    return " + ".join(name for name, on in names if on)


# Where the operator points TORCHELASTIC_ERROR_FILE: the container's termination message,
# which the kubelet copies into the pod status (at most 4096 bytes).
_ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
_TERMINATION_MESSAGE_LIMIT = 4096


def record_config_error(message: str) -> None:
    """Leave a config error (exit 2) as the container's termination message, in plain text:
    the operator ends the job InvalidSpec with it, whatever else the log holds last."""
    path = os.environ.get(_ERROR_FILE_ENV)
    if not path:
        return
    try:
        Path(path).write_bytes(message.encode()[:_TERMINATION_MESSAGE_LIMIT])
    except OSError as exc:
        log.warning("cannot write the config error to %s: %s", path, exc)


def start_rank_heartbeat(env: DistEnv, reporter: ProgressReporter) -> Heartbeat:
    """This rank's heartbeat, published every DTJ_HEARTBEAT_SECONDS; on rank 0, every
    rank's summary and rank 0's activity go into the progress report."""
    from dtjob_trainer.heartbeat import start_heartbeat

    def report_ranks(summary: dict[str, Any]) -> None:
        # Written only once the loop has reported its start (totalSteps set): before that
        # the document would say step 0, or the progress ConfigMap keep the last gang's step
        # with a fresh updateTime, while this gang still imports, meets and resumes.
        if reporter.current.totalSteps:
            reporter.update(ranks=summary)
        else:
            reporter.remember(ranks=summary)

    def report_activity(activity: str) -> None:
        # Not a write of its own: the loop's next report or the heartbeat's carries it.
        reporter.remember(activity=activity)

    zero = env.rank == 0
    return start_heartbeat(
        env.rank,
        env.world_size,
        env.heartbeat_seconds,
        on_summary=report_ranks if zero else None,
        stall_dump_seconds=env.stall_dump_seconds,
        on_activity=report_activity if zero else None,
    )


def _exit_now(code: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown on every path, success included: communication threads of
    # a process group (broken or torn down) can hang or call std::terminate in their C++
    # destructors, and the exit code must reach the kubelet unchanged.
    os._exit(code)


def run_process(env: DistEnv, result_file: str | None, verify_replicas: bool) -> NoReturn:
    """Train as this process's rank and exit the process with the contract's exit code."""
    stop = threading.Event()
    training = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if not training.is_set():
            log.warning("rank %d: SIGTERM before training started; exiting", env.rank)
            _exit_now(EXIT_PREEMPTED)
        stop.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    # Ctrl-C on a local launch reaches every process of the terminal: stop the same way.
    signal.signal(signal.SIGINT, on_sigterm)
    try:
        code = _train(env, result_file, verify_replicas, stop, training)
    except TrainerError as exc:
        print(f"dtjob-trainer rank {env.rank}: {exc}", file=sys.stderr)
        if isinstance(exc, ConfigError):
            record_config_error(str(exc))
        _exit_now(exc.exit_code)
    except Exception as exc:
        from dtjob_trainer.dist import is_comm_error

        traceback.print_exc()
        if is_comm_error(exc):
            lost = PeerLost(f"communication with a peer failed mid-training: {exc}")
            print(f"dtjob-trainer rank {env.rank}: {lost}", file=sys.stderr)
            _exit_now(lost.exit_code)
        _exit_now(EXIT_ERROR)
    _exit_now(code)


def _train(
    env: DistEnv,
    result_file: str | None,
    verify_replicas: bool,
    stop: threading.Event,
    training: threading.Event,
) -> int:
    # Heavy imports after the cheap checks, so a bad config fails in milliseconds.
    cfg = read_config_file(env.config_path)
    cfg = check_env_matches(env, cfg)
    from dtjob_trainer.strategies import load_strategy, strategy_key

    key = strategy_key(cfg)
    strategy = load_strategy(key)

    from dtjob_trainer import dist as tdist
    from dtjob_trainer.checkpoint import Checkpointer
    from dtjob_trainer.context import RunContext, RunOptions
    from dtjob_trainer.device import role_gpus, select_device
    from dtjob_trainer.history import make_history
    from dtjob_trainer.progress import make_reporter
    from dtjob_trainer.speed import enable_tf32

    backend = tdist.resolve_backend(env.backend if env.backend != "auto" else cfg.strategy.backend)
    device = select_device(
        backend,
        key,
        role_gpus(cfg, env.role),
        env.local_rank,
        who=f"rank {env.rank} ({env.role}-{env.role_index})",
    )
    enable_tf32(device)
    local_progress = None if env.in_cluster else env.checkpoint_dir
    ctx = RunContext(
        env=env,
        cfg=cfg,
        backend=backend,
        device=device,
        checkpoints=Checkpointer(env.checkpoint_dir, cfg.checkpoint.keep),
        reporter=make_reporter(env, local_progress),
        history=make_history(env),
        options=RunOptions(result_file=result_file, verify_replicas=verify_replicas),
        stop=stop,
        strategy_name="",
    )
    if env.rank == 0:
        log.info(
            "%s: %d processes, backend %s, device %s, model %s, %d steps of batch %d",
            key,
            env.world_size,
            backend,
            device,
            cfg.trainer.model.type,
            cfg.trainer.steps,
            cfg.trainer.batchSize,
        )
        if options := block_options(cfg):
            log.info("model blocks: %s", options)
    else:
        # One line from every other rank too: `kubectl logs` of a pod that is not rank 0
        # otherwise shows nothing at all, which reads like a pod that never started.
        log.info(
            "%s: rank %d of %d (%s-%d), backend %s, device %s; rank 0 reports progress",
            key,
            env.rank,
            env.world_size,
            env.role,
            env.role_index,
            backend,
            device,
        )
    tdist.init_distributed(env, backend)
    training.set()
    if stop.is_set():  # SIGTERM raced the rendezvous: nothing trained, nothing to save
        return EXIT_PREEMPTED
    ctx.heartbeat = start_rank_heartbeat(env, ctx.reporter)
    try:
        result = strategy(ctx)
    finally:
        ctx.heartbeat.stop()
        # The last points of the curve, at the end and after a SIGTERM's checkpoint alike.
        ctx.history.close()
    if env.rank == 0 and result_file:
        import torch

        payload: dict[str, Any] = asdict(result)
        torch.save(payload, result_file)
    tdist.shutdown()
    return EXIT_OK
