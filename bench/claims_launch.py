"""Launching the trainer for bench/gpu_claims.py's sections: `python -m dtjob_trainer
launch` as a child process (a process group of its own), what it left behind (Launched),
and SIGTERM's handler that ends the launches in flight when a section's time is up.

The memory cap of the heterogeneous section is a bench-only device: the trainer runs
stages as separate processes (`python -m dtjob_trainer launch`), so a `sitecustomize.py`
(HOOK) written to a temporary directory put first on their PYTHONPATH calls
`torch.cuda.set_per_process_memory_fraction` in the GPU stage's process, sets each stage's
CPU threads (OMP_NUM_THREADS: several for a CPU stage) and reports the GPU stage's peak
memory as the process exits. It is not part of the trainer, and it runs any
sitecustomize it shadows. Launches are started as interpreters (DTJOB_LAUNCH_FORK=0), as
the launcher does anyway where there is a GPU, so that the hook runs in the rehearsal too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from claims_common import GIB, REPO

# A launch given less than this could not even start its processes.
MIN_LAUNCH_SECONDS = 10.0


@dataclass
class Launched:
    """What one `python -m dtjob_trainer launch` left behind."""

    rc: int
    seconds: float
    output: str
    metrics: list[dict[str, Any]]
    hooks: dict[int, dict[str, Any]]
    timed_out: bool = False

    @property
    def oom(self) -> bool:
        return "out of memory" in self.output.lower()

    def error(self) -> str:
        """The last line that says why it failed (a rank's reason, else the last line)."""
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s"
        picks = [i for i, line in enumerate(lines) if "Error" in line or "dtjob-trainer" in line]
        if not picks:
            return (lines or ["(no output)"])[-1][:300]
        # "invalid job config:" says what on the next line.
        at = picks[-1]
        return " ".join(lines[at : at + (2 if lines[at].endswith(":") else 1)])[:300]

    def rate(self) -> float | None:
        """Samples/s at steady state: the median over the logged intervals but the first
        (which pays for warm-up: CUDA kernels, allocator, a Hogwild process started later
        than its sibling); the first one when it is all there is."""
        rates = [p["samplesPerSecond"] for p in self.metrics if p.get("samplesPerSecond")]
        steady = rates[1:] or rates
        return round(float(statistics.median(steady)), 2) if steady else None

    def final_loss(self) -> float | None:
        losses = [p["loss"] for p in self.metrics if p.get("loss") is not None]
        return round(float(losses[-1]), 4) if losses else None

    def summary(self, with_rate: bool = True) -> dict[str, Any]:
        """The launch as a record: its outcome, speed (not `with_rate` when it ran beside
        others) and the GPU stage's peak. A run ended at its time cap after logging keeps
        its rate (it is cut, not failed); from one interval only, that rate includes the
        warm-up and says so."""
        out: dict[str, Any] = {"ok": self.rc == 0, "seconds": round(self.seconds, 1)}
        cut = self.rc != 0 and self.timed_out and bool(self.metrics)
        if self.rc == 0 or cut:
            out["final_loss"] = self.final_loss()
            if with_rate:
                out["samples_per_second"] = self.rate()
                if len(self.metrics) == 1:
                    out["rate_includes_warm_up"] = True
        if cut:
            out["cut_at_step"] = self.metrics[-1]["step"]
        elif self.rc != 0:
            out.update(rc=self.rc, oom=self.oom, error=self.error())
        peaks = [h["peak_bytes"] for h in self.hooks.values() if h.get("peak_bytes")]
        if peaks:
            out["gpu_peak_gib"] = round(max(peaks) / GIB, 3)
        if self.hooks:  # the threads each stage computed with, by rank
            out["torch_threads"] = [self.hooks[r].get("torch_threads") for r in sorted(self.hooks)]
        return out

    def capped(self) -> bool:
        """Whether the hook capped the GPU stage's memory (it reports the fraction)."""
        return any("fraction" in h for h in self.hooks.values())


# The launch in flight and the temporary directories, so SIGTERM from the parent (its
# deadline) can end the launch's processes (a process group of their own, which killing
# this process does not reach) and remove the checkpoints (gigabytes on a GPU).
_RUNNING: list[subprocess.Popen[bytes]] = []
_WORKDIRS: list[Path] = []


def stop_running(signum: int, frame: FrameType | None) -> None:
    """SIGTERM's handler in a section's child (bench/gpu_claims.py --one sets it)."""
    for proc in _RUNNING:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    for path in _WORKDIRS:
        shutil.rmtree(path, ignore_errors=True)
    os._exit(128 + signum)


@contextlib.contextmanager
def workspace(prefix: str, tmp: str | None) -> Iterator[Path]:
    """A temporary directory, removed at the end, or by SIGTERM's handler."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=tmp))
    _WORKDIRS.append(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        _WORKDIRS.remove(path)


def trainer_env(
    extra: dict[str, str] | None = None, path_first: str | None = None
) -> dict[str, str]:
    """This environment with the trainer importable (`path_first` before it), without the
    contract's variables, and every launch started as interpreters: on a machine with a
    GPU the launcher does so anyway, and the sitecustomize hook runs only then."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DTJ_", "PET_"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    paths = [str(REPO / "trainer_image"), str(REPO / "api"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(([path_first] if path_first else []) + paths)
    env["DTJOB_LAUNCH_FORK"] = "0"
    env.update(extra or {})
    return env


@dataclass
class Job:
    """A launch started: its process (a process group of its own) and directory."""

    name: str
    directory: Path
    proc: subprocess.Popen[bytes]
    start: float


def start_job(spec: dict[str, Any], workdir: Path, name: str, env: dict[str, str]) -> Job:
    """Start a job with the trainer's own launcher; its output goes to a file (several
    launches may run at once: a pipe nobody reads would stall them)."""
    job = workdir / name
    job.mkdir(parents=True)
    spec_file = job / "spec.json"
    spec_file.write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "dtjob_trainer", "launch", "--checkpoint-dir", str(job / "ckpt")]
    env = {**env, "GPU_CLAIMS_REPORT_DIR": str(job)}
    with (job / "output.log").open("wb") as log:
        proc = subprocess.Popen(
            [*cmd, str(spec_file)], env=env, stdout=log, stderr=subprocess.STDOUT, process_group=0
        )
    _RUNNING.append(proc)
    return Job(name, job, proc, time.monotonic())


def finish_job(job: Job, until: float) -> Launched:
    """Wait for a started job until the monotonic time `until` (then end its processes);
    its checkpoints are deleted (they hold gigabytes), its metrics.jsonl read first."""
    from dtjob_trainer.history import read_metrics

    timed_out = False
    try:
        job.proc.wait(timeout=max(0.1, until - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.proc.pid, signal.SIGKILL)
        job.proc.wait()
    finally:
        _RUNNING.remove(job.proc)
    seconds = time.monotonic() - job.start
    output = (job.directory / "output.log").read_text(errors="replace")
    rc = job.proc.returncode
    print(f"== {job.name}: exit {rc} after {seconds:.1f} s\n{output}", file=sys.stderr)
    hooks = {}
    for path in job.directory.glob("hook-rank*.json"):
        report = json.loads(path.read_text())
        hooks[int(report["rank"])] = report
    metrics = read_metrics(job.directory / "ckpt" / "metrics.jsonl")
    shutil.rmtree(job.directory / "ckpt", ignore_errors=True)
    return Launched(rc, seconds, output, metrics, hooks, timed_out)


def launch_job(
    spec: dict[str, Any], workdir: Path, name: str, timeout: float, env: dict[str, str]
) -> Launched:
    """Run a job to its end, or for `timeout` seconds at most."""
    return finish_job(start_job(spec, workdir, name, env), time.monotonic() + timeout)


# Bench-only start-up hook of the stage processes (see the module docstring). Python runs
# a `sitecustomize` module found on sys.path at start-up, before the trainer imports torch:
# OMP_NUM_THREADS set here still counts, and the cap is in place before any allocation.
HOOK = '''"""Bench-only start-up hook written by bench/gpu_claims.py; not part of the trainer."""
import json
import os
import sys


def _setup():
    rank = os.environ.get("RANK")
    report_dir = os.environ.get("GPU_CLAIMS_REPORT_DIR")
    if rank is None or report_dir is None:
        return  # the launcher itself, or anything else on this PYTHONPATH
    threads = os.environ.get("GPU_CLAIMS_THREADS", "").split(",")
    if int(rank) < len(threads) and threads[int(rank)]:
        os.environ["OMP_NUM_THREADS"] = threads[int(rank)]
    report = {"rank": int(rank), "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    gpu = rank == os.environ.get("GPU_CLAIMS_GPU_RANK")
    cap = os.environ.get("GPU_CLAIMS_CAP_BYTES")
    if gpu and cap:
        import torch

        report["cap_bytes"] = int(cap)
        if torch.cuda.is_available():
            total = torch.cuda.get_device_properties(0).total_memory
            report["fraction"] = min(1.0, int(cap) / total)
            torch.cuda.set_per_process_memory_fraction(report["fraction"], 0)
    real_exit = os._exit

    # The trainer leaves with os._exit (no atexit): report on the way out.
    def exit_with_report(code):
        try:
            torch = sys.modules.get("torch")
            if torch is not None:
                report["torch_threads"] = torch.get_num_threads()
                if gpu and torch.cuda.is_available() and torch.cuda.is_initialized():
                    report["peak_bytes"] = torch.cuda.max_memory_allocated(0)
            report["exit"] = code
            path = os.path.join(report_dir, "hook-rank%s.json" % rank)
            with open(path, "w") as f:
                json.dump(report, f)
        finally:
            real_exit(code)

    os._exit = exit_with_report


def _chain():
    """Run the sitecustomize this one shadows, if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_setup()
_chain()
'''
