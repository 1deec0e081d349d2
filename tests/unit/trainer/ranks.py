"""Running a test's own function as N real ranks over gloo on 127.0.0.1.

`run_ranks(fn, world, *args)` starts `world` processes (torch.multiprocessing, forked from a
server that has imported torch and the trainer), joins them in one gloo process group and
calls `fn(rank, world, *args)` in each; it returns the values in rank order (anything
torch.save can write). `fn` may live in a test module: the child loads the module from its
file, so pytest's import mode does not matter.

`strategy_context(spec, rank, world, workdir)` builds the `RunContext` a strategy gets in a
pod (contract variables, config, checkpoints, progress file) so a test can call a
strategy's `run(ctx)` inside a rank. The config is validated field by field but without the
cross-field rules, so a test can reach a strategy form those rules do not offer yet.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from unit.trainer import forkserver
from unit.trainer.harness import free_port

JOIN_TIMEOUT = 240.0
# Ranks fork from a server that imported torch and the trainer once per pytest process
# (forkserver.py): a spawned rank spent 3-4 s of CPU importing them, most of a small
# test's time on 2 cores. A forked rank is a fresh process all the same: its own gloo
# group, globals and seeds; only the imported modules come from the server.


def _load_function(path: str, qualname: str) -> Callable[..., Any]:
    name = f"_ranks_{Path(path).stem}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part)
    return target  # type: ignore[no-any-return]


def _child(
    rank: int,
    world: int,
    port: int,
    path: str,
    qualname: str,
    args: tuple[Any, ...],
    out: str,
    environ: dict[str, str],
) -> None:
    # The fork server's environment is that of its start: the test's, as a spawned rank
    # would have inherited it.
    os.environ.clear()
    os.environ.update(environ)
    torch.set_num_threads(1)
    try:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
        )
        value = _load_function(path, qualname)(rank, world, *args)
        torch.save({"value": value}, f"{out}/rank{rank}.pt")
    except BaseException:
        torch.save({"error": traceback.format_exc()}, f"{out}/rank{rank}.pt")
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    # Done and the result saved: leave without interpreter teardown, as the trainer's
    # processes do (runner._exit_now). After torch.distributed.checkpoint has run, the
    # teardown sometimes aborts in a C++ destructor ("terminate called without an active
    # exception"), which would fail a rank that had finished its work.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(fn: Callable[..., Any], world: int, *args: Any, workdir: Path) -> list[Any]:
    """Run `fn(rank, world, *args)` on `world` gloo ranks; return the values by rank."""
    out = workdir / f"ranks-{fn.__name__}"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*.pt"):
        old.unlink()
    path = os.path.abspath(fn.__code__.co_filename)
    forkserver.context()  # started with one OpenMP thread
    ctx = mp.start_processes(
        _child,
        args=(world, free_port(), path, fn.__qualname__, args, str(out), dict(os.environ)),
        nprocs=world,
        join=False,
        start_method="forkserver",
    )
    try:
        while not ctx.join(timeout=JOIN_TIMEOUT):
            pass
    except mp.ProcessRaisedException:
        errors = []
        for rank in range(world):
            file = out / f"rank{rank}.pt"
            if file.exists():
                saved = torch.load(file, weights_only=False)
                if "error" in saved:
                    errors.append(f"rank {rank}:\n{saved['error']}")
        raise AssertionError("\n".join(errors) or "a rank failed") from None
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    results = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world)]
    return [r["value"] for r in results]


def strategy_context(spec: dict[str, Any], rank: int, world: int, workdir: Path) -> Any:
    """The RunContext of `rank` for `spec`, inside a `run_ranks` child (group joined)."""
    from dtjob_trainer.checkpoint import Checkpointer
    from dtjob_trainer.config import load_config
    from dtjob_trainer.context import RunContext
    from dtjob_trainer.env import read_env
    from dtjob_trainer.progress import make_reporter

    cfg = load_config(spec)
    env = read_env(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "1",
            "WORLD_SIZE": str(world),
            "RANK": str(rank),
            "DTJ_CONFIG": str(workdir / "job.json"),
            "DTJ_CHECKPOINT_DIR": str(workdir / "ckpt"),
        }
    )
    return RunContext(
        env=env,
        cfg=cfg,
        backend="gloo",
        device=torch.device("cpu"),
        checkpoints=Checkpointer(env.checkpoint_dir, cfg.checkpoint.keep),
        reporter=make_reporter(env, env.checkpoint_dir),
    )
