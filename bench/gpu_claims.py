"""Three claims of the bundled trainer measured on one GPU (bench/results/gpu_claims.json):

1. `hetero`, the heterogeneous pipeline (roles.stage.groups, docs/strategies.md): a GPT of
   dModel 1024, 16 heads, seqLen 256, vocab 8192, batch 4 in 4 micro-batches, 1F1B,
   AdamW fp32, under a GPU memory cap of `--cap-gib` (default 2 GiB) on the GPU stage.
   (a) The deepest that trains on the GPU stage alone (a 1-stage Pipeline of one GPU
   group): 2 steps of every depth from half to twice an estimate (16 bytes a parameter
   for fp32 weights, gradients and Adam's moments, plus the bytes autograd saves per
   block, measured on the CPU as bench/hetero_memory.py does), launched side by side (each
   GPU stage has a cap of its own), one round whatever the estimate missed; the largest
   that fits below the first out-of-memory, with every depth's peak. Then 2 steps with
   1 and with 2 CPU stages in front (side by side), the GPU stage keeping the blocks it
   trained alone less the embedding, each CPU stage taking as many: models 2 and 3 times
   as deep, which must train. (b) The speed cost: samples/s of the deepest model the GPU
   trains alone, alone and behind 1 CPU stage with the trainer's own balanced split
   (8 steps each, one launch at a time, the rate of the second half).
2. `ps`: samples/s of the parameter-server modes computing on the GPU (protocol over gloo
   through host memory) against DataParallel (1 worker, nccl) on the same GPU: an fp32 MLP
   of 4 hidden layers of 2048 on digits, SGD, 512 samples a step for every computing
   process (DataParallel: 1 worker; Sync, Async and asynchronous EASGD: 2 workers and 1
   server; Hogwild: 1 worker of 2 processes), 400 steps logged every 5. A run gets an
   equal share of the section's time; one that needs more is cut there and its logged
   intervals still give its rate (the median of the intervals but the first, which pays
   for the warm-up).
3. `async`, the stall of a background sharded checkpoint (async_checkpoint.AsyncSaver):
   one rank (nccl, world size 1) trains an FSDP2 GPT of 507M parameters (32 layers of
   dModel 1024, seqLen 1024, vocab 50304, batch 4, fused AdamW, fp32 with TF32 matmuls)
   built on the GPU; the median step time of 20 steps without a save; a background save
   (the first also pins the host buffers the later ones reuse), stepping until it is
   committed: what `start` blocked the loop, the step times meanwhile; the blocking save
   (sharded.save_sharded); a second background save. Checkpoints go to /dev/shm when it
   has room (the figures are then the trainer's stall, not the disk's speed).

    PYTHONPATH=api:trainer_image python bench/gpu_claims.py [--budget SECONDS] [--out PATH]
        [--rehearse] [--sections hetero,ps,async] [--cap-gib 2] [--tmp DIR]

`--rehearse`, or no CUDA, runs every section's code on the CPU with tiny sizes (gloo, CPU
stages and workers; no cap is enforced), the rehearsal before a GPU window; its records
say "device": "cpu", "rehearsal": true. Every section runs in a child process of its own
(`--one`), so an out-of-memory or a crash costs that section only: its record then has
{"error": its last stderr line} beside what it had measured, and its stderr (with every
launch's output) is kept beside the record as <out>-<section>.log. The sections share one
`--budget` in proportion to their nominal seconds on a GPU (100, 70, 40; what one leaves
goes to the later ones), a child ends its launches in flight when its time is up, and the
record is rewritten after each section, so a run killed from outside keeps the sections
taken so far. A short table of the figures ends the output.

The memory cap of the heterogeneous section is a bench-only device: the trainer runs
stages as separate processes (`python -m dtjob_trainer launch`), so a `sitecustomize.py`
written to a temporary directory put first on their PYTHONPATH calls
`torch.cuda.set_per_process_memory_fraction` in the GPU stage's process, sets each stage's
CPU threads (OMP_NUM_THREADS: several for a CPU stage) and reports the GPU stage's peak
memory as the process exits. It is not part of the trainer, and it runs any
sitecustomize it shadows. Launches are started as interpreters (DTJOB_LAUNCH_FORK=0), as
the launcher does anyway where there is a GPU, so that the hook runs in the rehearsal too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from dtjob_trainer.async_checkpoint import AsyncSaver

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "gpu_claims.json"
SECTIONS = ("hetero", "ps", "async")
# Seconds each section is meant to take on the GPU machine: the budget is shared out in
# these proportions (what a section leaves unused goes to the later ones).
NOMINAL_SECONDS = {"hetero": 100.0, "ps": 70.0, "async": 40.0}
# A child started with less than this could not even start its first process.
MIN_CHILD_SECONDS = 15.0
# Kept from a child's deadline for ending its last launch (a CUDA process takes seconds to
# die) and printing its record.
CHILD_MARGIN_SECONDS = 8.0
GIB, MIB = 2**30, 2**20
# fp32 weights, gradients and Adam's two moments: bytes a trained parameter holds.
TRAINING_BYTES_PER_PARAMETER = 16


# --- sizes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeteroSizes:
    """The heterogeneous pipeline's GPT and run lengths."""

    d_model: int
    heads: int
    seq_len: int
    vocab: int
    micro: int
    microbatches: int
    steps: int
    """Steps of the launches whose speed is compared (the rate is the second half's)."""
    memory_steps: int
    """Steps of the launches that only show a layout trains."""
    cap_bytes: int
    """The GPU stage's cap (on the CPU a nominal one: the estimate's, not enforced)."""
    slack_bytes: int
    """Added to the estimate for what no block holds (CUDA allocator, cuBLAS workspace)."""
    max_probes: int
    """Depths tried on the GPU alone at most (side by side), to bracket its largest."""
    launch_seconds: float
    """The longest one launch may take."""


@dataclass(frozen=True)
class PsSizes:
    """The parameter-server comparison's MLP and run lengths."""

    hidden: tuple[int, ...]
    batch: int
    """Samples of one step of each computing process."""
    steps: int
    """Steps of every run: enough for the fast modes' intervals to be measurable; a slow
    one is cut at its share of the time (its logged intervals still give its rate)."""
    log_every: int
    threads: int
    launch_seconds: float


@dataclass(frozen=True)
class AsyncSizes:
    """The background checkpoint's GPT and step counts."""

    layers: int
    d_model: int
    heads: int
    seq_len: int
    vocab: int
    batch: int
    warmup: int
    steps: int
    max_steps_in_flight: int


GPU_HETERO = HeteroSizes(1024, 16, 256, 8192, 1, 4, 8, 2, 2 * GIB, 128 * MIB, 8, 45.0)
# 1F1B needs a micro-batch per stage at least: 4 for up to 3 stages.
# The rehearsal's: one probe, long launch limits. It runs beside make test's other lanes
# on 2 cores, where one launch of 2 to 3 processes took over 60 s (2026-11-28).
CPU_HETERO = HeteroSizes(64, 4, 32, 256, 1, 4, 4, 2, 3 * MIB, 0, 1, 300.0)
GPU_PS = PsSizes((2048,) * 4, 512, 400, 5, 4, 30.0)
CPU_PS = PsSizes((64, 64), 32, 16, 4, 1, 300.0)
# What the rehearsal runs of PS_RUNS: the launch, rate and ratio code of every run is the
# same; DataParallel (the reference) and one parameter-server mode show it works.
REHEARSED_PS = ("DataParallel", "PS-Async")
GPU_ASYNC = AsyncSizes(32, 1024, 16, 1024, 50304, 4, 3, 20, 400)
CPU_ASYNC = AsyncSizes(2, 64, 4, 32, 256, 2, 1, 4, 50)


def on_gpu(rehearse: bool) -> bool:
    """Whether the sections run on the GPU (else the CPU rehearsal)."""
    return torch.cuda.is_available() and not rehearse


def section_header(rehearse: bool) -> dict[str, Any]:
    """What every section's record starts with: where it ran."""
    gpu = on_gpu(rehearse)
    head: dict[str, Any] = {
        "device": "cuda" if gpu else "cpu",
        "rehearsal": not gpu,
        "torch": torch.__version__,
    }
    if gpu:
        head["gpu"] = torch.cuda.get_device_name(0)
    return head


class Deadline:
    """Seconds left to a monotonic deadline (clock steps do not matter)."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        return self.at - time.monotonic()


def emit(record: dict[str, Any]) -> None:
    """A child's record so far, as one JSON line: the parent keeps the last whole one,
    so a child killed at its deadline still hands over what it measured."""
    print(json.dumps(record), flush=True)


# --- launching the trainer --------------------------------------------------------------


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


def _stop_running(signum: int, frame: FrameType | None) -> None:
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


# --- 1. the heterogeneous pipeline ------------------------------------------------------

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


def gpt_model(s: HeteroSizes, layers: int) -> dict[str, Any]:
    return {
        "type": "GPT",
        "layers": layers,
        "dModel": s.d_model,
        "heads": s.heads,
        "seqLen": s.seq_len,
        "vocabSize": s.vocab,
    }


def pipeline_spec(
    s: HeteroSizes, layers: int, groups: list[dict[str, Any]], steps: int
) -> dict[str, Any]:
    """A 1F1B Pipeline job over stage `groups` (AdamW fp32 on synthetic tokens)."""
    return {
        "strategy": {
            "type": "Pipeline",
            "pipeline": {"schedule": "1F1B", "microbatches": s.microbatches},
        },
        "roles": {"stage": {"replicas": len(groups), "groups": groups}},
        "trainer": {
            "model": gpt_model(s, layers),
            "dataset": {"type": "SyntheticTokens", "samples": 64, "evalSamples": 2},
            "optimizer": {"type": "AdamW", "lr": 1e-4},
            "batchSize": s.micro * s.microbatches,
            "steps": steps,
            "logEverySteps": max(1, steps // 2),
            "precision": "fp32",
        },
        "checkpoint": {"everySteps": 100000, "keep": 1},
    }


def stage_groups(cpu_blocks: list[int | None], gpu_blocks: int | None, gpu: bool) -> list[Any]:
    """CPU groups of one stage each (blocks given or None: balanced by the trainer), then
    the GPU group of one stage (a CPU one in a rehearsal)."""
    groups: list[dict[str, Any]] = []
    for i, blocks in enumerate(cpu_blocks):
        groups.append({"name": f"cpu{i}", "replicas": 1, "gpus": 0})
        if blocks is not None:
            groups[-1]["blocks"] = blocks
    groups.append({"name": "gpu", "replicas": 1, "gpus": 1 if gpu else 0})
    if gpu_blocks is not None:
        groups[-1]["blocks"] = gpu_blocks
    return groups


def block_bytes(s: HeteroSizes) -> list[tuple[int, int]]:
    """(training-state bytes, bytes autograd saves for one micro-batch) of the embedding, a
    transformer block and the head (with the loss), measured on the CPU."""
    from dtjob_trainer.config import load_config
    from dtjob_trainer.models import build_model, loss_fn

    model = build_model(load_config(pipeline_spec(s, 1, stage_groups([], 3, False), 1)))
    h: torch.Tensor = torch.randint(0, s.vocab, (s.micro, s.seq_len))
    blocks = list(model.children())
    out = []
    for index, block in enumerate(blocks):
        state = TRAINING_BYTES_PER_PARAMETER * sum(p.numel() for p in block.parameters())
        seen: dict[int, int] = {}

        def pack(t: torch.Tensor, seen: dict[int, int] = seen) -> torch.Tensor:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
            return t

        inp = h.detach().requires_grad_(h.is_floating_point())
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = block(inp)
            if index == len(blocks) - 1:
                loss_fn(y, torch.zeros(y.shape[:-1], dtype=torch.int64))
        # The block's input is counted by the block before it (or is token ids).
        seen.pop(inp.untyped_storage().data_ptr(), None)
        out.append((state, sum(seen.values())))
        h = y.detach()
    return out


@dataclass(frozen=True)
class Estimate:
    """Bytes of the GPU stage holding the whole model of `layers` blocks: fixed (embedding,
    head, allocator slack) plus per block, with a margin for what autograd's bookkeeping
    misses (gradients of activations, allocator rounding)."""

    fixed: int
    per_block: int
    layers: int


ESTIMATE_MARGIN = 1.2


def estimate(s: HeteroSizes) -> Estimate:
    """The largest `layers` the estimate lets the GPU stage hold alone under the cap."""
    (emb_state, emb_act), (blk_state, blk_act), (head_state, head_act) = block_bytes(s)
    fixed = int(ESTIMATE_MARGIN * (emb_state + emb_act + head_state + head_act)) + s.slack_bytes
    per_block = int(ESTIMATE_MARGIN * (blk_state + blk_act))
    return Estimate(fixed, per_block, max(1, (s.cap_bytes - fixed) // per_block))


def gpt_parameters(s: HeteroSizes, layers: int) -> int:
    from dtjob_trainer.models.gpt import gpt_parameter_count

    return gpt_parameter_count(layers, s.d_model, s.seq_len, s.vocab)


@dataclass(frozen=True)
class Layout:
    """One launch of the section: a GPT of `layers` over stage `groups` (the GPU's last)."""

    name: str
    layers: int
    groups: list[dict[str, Any]]
    steps: int
    cpu_threads: int


# A launch given less than this could not even start its processes.
MIN_LAUNCH_SECONDS = 10.0


@dataclass
class HeteroRun:
    """How the section's launches are made: sizes, hook directory, deadline."""

    sizes: HeteroSizes
    gpu: bool
    workdir: Path
    deadline: Deadline

    def env(self, layout: Layout) -> dict[str, str]:
        """The launch's environment: the hook first on PYTHONPATH and what it reads."""
        n = len(layout.groups)
        threads = [str(layout.cpu_threads)] * (n - 1) + ["2" if self.gpu else "1"]
        extra = {
            "GPU_CLAIMS_THREADS": ",".join(threads),
            "GPU_CLAIMS_GPU_RANK": str(n - 1),
            # Also in a rehearsal, where the hook stops short of the CUDA call.
            "GPU_CLAIMS_CAP_BYTES": str(self.sizes.cap_bytes),
        }
        return trainer_env(extra, path_first=str(self.workdir / "hook"))

    def launch_all(self, layouts: list[Layout]) -> list[Launched] | None:
        """Run `layouts` at once, to their end or the time left; None when too little is
        left to start. Each GPU stage process has a cap of its own, so launches side by
        side do not change each other's memory verdicts (their speeds, yes)."""
        timeout = min(self.sizes.launch_seconds, self.deadline.left())
        if timeout < MIN_LAUNCH_SECONDS:
            return None
        jobs = []
        for layout in layouts:
            spec = pipeline_spec(self.sizes, layout.layers, layout.groups, layout.steps)
            jobs.append(start_job(spec, self.workdir, layout.name, self.env(layout)))
        until = time.monotonic() + timeout
        return [finish_job(job, until) for job in jobs]

    def alone(self, layers: int, steps: int) -> Layout:
        """The whole model on the GPU stage."""
        groups = stage_groups([], layers + 2, self.gpu)
        return Layout(f"alone-{layers}-{steps}", layers, groups, steps, 1)


SKIPPED = {"skipped": "the section's time is spent"}


def search_alone(run: HeteroRun, est: Estimate, record: dict[str, Any]) -> int | None:
    """The largest depth the GPU stage trains alone: launches of every depth from half the
    estimate to twice it, side by side (one round of launches, whatever the estimate
    missed); the largest that fits below the first out-of-memory."""
    depths = list(range(max(1, est.layers // 2), 2 * est.layers + 1))[: run.sizes.max_probes]
    alone: dict[str, Any] = {"probed": depths, "side_by_side": True}
    record["alone"] = alone
    outs = run.launch_all([run.alone(d, run.sizes.memory_steps) for d in depths])
    if outs is None:
        alone.update(SKIPPED)
        return None
    alone["attempts"] = [
        {"layers": d, **out.summary(with_rate=False)} for d, out in zip(depths, outs, strict=True)
    ]
    if run.gpu and not all(out.capped() for out in outs):
        alone["error"] = "a GPU stage ran without the memory cap: the hook did not run"
        return None
    ooms = [d for d, out in zip(depths, outs, strict=True) if out.oom]
    first_oom = min(ooms, default=None)
    fits = [
        d
        for d, out in zip(depths, outs, strict=True)
        if out.rc == 0 and (first_oom is None or d < first_oom)
    ]
    largest = max(fits, default=None)
    alone.update(largest_layers=largest, first_oom_layers=first_oom)
    if largest is not None:
        alone["parameters"] = gpt_parameters(run.sizes, largest)
    return largest


def cpu_stage_layout(run: HeteroRun, layers: int, cpu_stages: int, threads: int) -> Layout:
    """The GPU stage keeps the blocks it trained alone (less the embedding) plus the head;
    each of `cpu_stages` CPU stages in front takes as many (the first also the
    embedding): a model (cpu_stages + 1) times as deep."""
    total = layers * (cpu_stages + 1)
    cpu_blocks: list[int | None] = [layers + (1 if i == 0 else 0) for i in range(cpu_stages)]
    groups = stage_groups(cpu_blocks, layers + 1, run.gpu)
    return Layout(f"cpu{cpu_stages}-{total}", total, groups, run.sizes.memory_steps, threads)


def with_cpu_stages(run: HeteroRun, layers: int, threads: int) -> list[dict[str, Any]]:
    """1 and 2 CPU stages in front of the GPU stage, side by side: does each train? (The
    rehearsal: 1.)"""
    layouts = [cpu_stage_layout(run, layers, k, threads) for k in ((1, 2) if run.gpu else (1,))]
    outs = run.launch_all(layouts)
    rows = []
    for k, layout in enumerate(layouts, start=1):
        row: dict[str, Any] = {"cpu_stages": k, "layers": layout.layers}
        if outs is None:
            rows.append({**row, **SKIPPED})
            continue
        row.update(
            parameters=gpt_parameters(run.sizes, layout.layers),
            blocks_per_stage=[g["blocks"] for g in layout.groups],
            cpu_threads_per_cpu_stage=threads,
        )
        rows.append({**row, **outs[k - 1].summary(with_rate=False)})
    return rows


def split_of(output: str) -> list[int] | None:
    """The blocks per stage the trainer chose (its rank-0 log line)."""
    marker = "stage groups: blocks per stage ["
    for line in output.splitlines():
        if marker in line:
            inside = line.split(marker, 1)[1].split("]", 1)[0]
            return [int(x) for x in inside.split(",")]
    return None


def speed_cost(run: HeteroRun, layers: int, threads: int) -> dict[str, Any]:
    """Samples/s of the largest model the GPU trains alone, alone and behind one CPU stage
    with the split the trainer's balancing picks (blocks timed on each stage's device),
    one launch at a time."""
    row: dict[str, Any] = {"layers": layers, "cpu_threads_per_cpu_stage": threads}
    alone = run.launch_all([run.alone(layers, run.sizes.steps)])
    if alone is None:
        return {**row, **SKIPPED}
    row["alone"] = alone[0].summary()
    groups = stage_groups([None], None, run.gpu)
    out = run.launch_all([Layout(f"balanced-{layers}", layers, groups, run.sizes.steps, threads)])
    if out is None:
        return {**row, "with_1_cpu_stage": SKIPPED}
    row["with_1_cpu_stage"] = {"blocks_per_stage": split_of(out[0].output), **out[0].summary()}
    alone_rate, rate = alone[0].rate(), out[0].rate()
    if alone[0].rc == 0 and out[0].rc == 0 and alone_rate and rate:
        row["ratio"] = round(rate / alone_rate, 3)
    return row


def section_hetero(rehearse: bool, seconds: float, cap_gib: float, tmp: str | None) -> None:
    gpu = on_gpu(rehearse)
    s = GPU_HETERO if gpu else CPU_HETERO
    if gpu:
        s = replace(s, cap_bytes=int(cap_gib * GIB))
    cpus = os.cpu_count() or 2
    record: dict[str, Any] = {
        **section_header(rehearse),
        "model": gpt_model(s, 0) | {"layers": None},
        "batch": s.micro * s.microbatches,
        "microbatches": s.microbatches,
        "schedule": "1F1B",
        "optimizer": "AdamW fp32",
        "steps": {"speed": s.steps, "memory": s.memory_steps},
        "cap_gib": round(s.cap_bytes / GIB, 4),
        "cap_enforced": gpu,
    }
    deadline = Deadline(seconds - CHILD_MARGIN_SECONDS)
    est = estimate(s)
    record["estimate"] = {**asdict(est), "margin": ESTIMATE_MARGIN}
    emit(record)
    with workspace("gpu-claims-hetero-", tmp) as workdir:
        (workdir / "hook").mkdir()
        (workdir / "hook" / "sitecustomize.py").write_text(HOOK)
        run = HeteroRun(s, gpu, workdir, deadline)
        largest = search_alone(run, est, record)
        emit(record)
        if largest is None:
            record["with_cpu_stages"] = []
            record["note"] = "no model trained on the GPU stage alone: nothing to compare"
            emit(record)
            return
        # Several threads for a CPU stage (a GPU stage and a launcher need few), as many as
        # the cores leave for the 3 CPU stages side by side, then for 1 alone.
        record["with_cpu_stages"] = with_cpu_stages(run, largest, max(1, min(8, (cpus - 4) // 3)))
        emit(record)
        if gpu:  # the rehearsal's PS section runs the same rate code
            record["speed"] = speed_cost(run, largest, max(1, min(8, cpus - 4)))
        record["hooks_ran"] = bool(list(workdir.glob("*/hook-rank*.json")))
        emit(record)


# --- 2. parameter servers against DataParallel ------------------------------------------

# name -> (strategy, parameterServer settings, workers, ps replicas, processes per worker)
PS_RUNS: dict[str, tuple[str, dict[str, Any], int, int, int]] = {
    "DataParallel": ("DataParallel", {}, 1, 0, 1),
    "PS-Sync": ("ParameterServer", {"mode": "Sync"}, 2, 1, 1),
    "PS-Async": ("ParameterServer", {"mode": "Async"}, 2, 1, 1),
    "PS-EASGD-async": ("ParameterServer", {"mode": "EASGD"}, 2, 1, 1),
    "PS-Hogwild": ("ParameterServer", {"mode": "Hogwild", "hogwildProcesses": 2}, 1, 0, 2),
}


def ps_spec(name: str, s: PsSizes, gpu: bool) -> dict[str, Any]:
    """One of PS_RUNS: workers on the GPU (one GPU shared) with every computing process
    taking `s.batch` samples a step; DataParallel over nccl, the rest over gloo."""
    strategy, ps, workers, servers, procs = PS_RUNS[name]
    roles: dict[str, Any] = {"worker": {"replicas": workers}}
    if gpu:
        roles["worker"].update(gpus=1, procsPerPod=1)
    if servers:
        roles["ps"] = {"replicas": servers}
    strat: dict[str, Any] = {"type": strategy, "backend": "gloo"}
    if ps:
        strat["parameterServer"] = ps
    elif gpu:
        strat["backend"] = "nccl"
    return {
        "strategy": strat,
        "roles": roles,
        "trainer": {
            "model": {"type": "MLP", "hiddenSizes": list(s.hidden)},
            "optimizer": {"type": "SGD", "lr": 0.01},
            "batchSize": s.batch * workers * procs,
            "steps": s.steps,
            "logEverySteps": s.log_every,
            "precision": "fp32",
        },
        "checkpoint": {"everySteps": 100000, "keep": 1},
        "network": {"rendezvousTimeoutSeconds": 60},
    }


def section_ps(rehearse: bool, seconds: float, cap_gib: float, tmp: str | None) -> None:
    gpu = on_gpu(rehearse)
    s = GPU_PS if gpu else CPU_PS
    runs: dict[str, Any] = {}
    record: dict[str, Any] = {
        **section_header(rehearse),
        "model": {"type": "MLP", "hiddenSizes": list(s.hidden), "dataset": "digits"},
        "optimizer": "SGD fp32",
        "batch_per_computing_process": s.batch,
        "steps": s.steps,
        "threads_per_process": s.threads,
        "log_every_steps": s.log_every,
        "rate": "samples/s of all computing processes (rank 0's global steps x the global "
        "batch), median of the logged intervals but the first",
        "runs": runs,
    }
    deadline = Deadline(seconds - CHILD_MARGIN_SECONDS)
    env = trainer_env({"OMP_NUM_THREADS": str(s.threads)})
    with workspace("gpu-claims-ps-", tmp) as work:
        chosen = {k: v for k, v in PS_RUNS.items() if gpu or k in REHEARSED_PS}
        for i, (name, (_, _, workers, servers, procs)) in enumerate(chosen.items()):
            row: dict[str, Any] = {
                "workers": workers,
                "servers": servers,
                "computing_processes": workers * procs,
            }
            runs[name] = row
            # An equal share of what is left: a run that does not need it leaves it.
            timeout = min(s.launch_seconds, deadline.left() / (len(chosen) - i))
            if timeout < MIN_LAUNCH_SECONDS:
                row["skipped"] = "the section's time is spent"
                continue
            out = launch_job(ps_spec(name, s, gpu), work, name, timeout, env)
            row.update(out.summary())
            base = runs["DataParallel"].get("samples_per_second")
            if base and row.get("samples_per_second"):
                row["ratio_to_data_parallel"] = round(row["samples_per_second"] / base, 3)
            emit(record)


# --- 3. the background checkpoint's stall -----------------------------------------------


def fsdp_gpt(s: AsyncSizes, device: torch.device) -> torch.nn.Module:
    """The trainer's GPT built on the meta device, sharded with FSDP2 over the one rank,
    then allocated and initialised on `device` itself (a model of this size built on the
    CPU and copied would take longer than the measurement)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from dtjob_trainer.config import load_config
    from dtjob_trainer.models import build_model

    spec = {
        "strategy": {"type": "FSDP"},
        "roles": {"worker": {"replicas": 1}},
        "trainer": {
            "model": {
                "type": "GPT",
                "layers": s.layers,
                "dModel": s.d_model,
                "heads": s.heads,
                "seqLen": s.seq_len,
                "vocabSize": s.vocab,
            },
            "dataset": {"type": "SyntheticTokens"},
            "optimizer": {"type": "AdamW", "lr": 1e-4},
        },
    }
    mesh = init_device_mesh(device.type, (1,))
    model = build_model(load_config(spec), torch.float32, meta=True)
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=device)
    with torch.no_grad():
        for name, param in model.named_parameters():
            local = param.to_local() if isinstance(param, DTensor) else param
            if local.ndim > 1:
                local.normal_(0.0, 0.02)
            else:  # LayerNorm weights 1, biases 0 (the values do not matter, finite do)
                local.fill_(1.0 if name.endswith("weight") else 0.0)
    return model


@dataclass
class Stepper:
    """Timed training steps of the FSDP model on fixed random tokens."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    x: torch.Tensor
    y: torch.Tensor
    device: torch.device
    step_no: int = 0

    def step(self) -> float:
        """One synchronised step; its seconds."""
        from dtjob_trainer.models import loss_fn

        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(loss_fn(self.model(self.x), self.y))
        self.optimizer.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.step_no += 1
        return time.perf_counter() - start

    def steps(self, n: int) -> list[float]:
        return [self.step() for _ in range(n)]


def seconds_summary(times: list[float]) -> dict[str, Any]:
    if not times:
        return {"steps": 0}
    return {
        "steps": len(times),
        "median": round(statistics.median(times), 4),
        "max": round(max(times), 4),
    }


def background_save(
    saver: AsyncSaver, stepper: Stepper, s: AsyncSizes, deadline: Deadline
) -> dict[str, Any]:
    """Start a background save, step until it is committed (at least once, at most
    `max_steps_in_flight` steps or to the deadline), then wait for it."""
    start = time.perf_counter()
    saver.start(stepper.step_no)
    staged = time.perf_counter() - start
    times: list[float] = []
    committed_after = None
    while len(times) < s.max_steps_in_flight and deadline.left() > 0:
        times.append(stepper.step())
        if saver.committed() is not None:
            committed_after = time.perf_counter() - start
            break
    outcome = saver.wait()
    waited = time.perf_counter() - start
    return {
        "start_blocked_loop_seconds": round(staged, 4),
        "committed_after_seconds": round(committed_after or waited, 3),
        "committed_while_stepping": committed_after is not None,
        "outcome": outcome.kind if outcome is not None else None,
        "step_seconds_during": seconds_summary(times),
    }


def checkpoint_root(tmp: str | None, need: int) -> tuple[str | None, str]:
    """Where the checkpoints go, and what that is: /dev/shm when it has room for two (the
    previous one stays until the next is committed), so that the window's seconds go to
    the trainer's stall rather than to the disk (a slower disk keeps a save in flight
    longer, it does not change what a step pays meanwhile); else `tmp`, a disk."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 2 * need + GIB:
        return str(shm), "/dev/shm (memory)"
    return tmp, f"{tmp or tempfile.gettempdir()} (disk)"


def saves_in_flight(
    record: dict[str, Any], stepper: Stepper, s: AsyncSizes, deadline: Deadline, tmp: str | None
) -> None:
    """A background save (the first also pins the host buffers every later one reuses),
    the blocking save, then a background save again, each while time is left for it."""
    from dtjob_trainer.async_checkpoint import AsyncSaver
    from dtjob_trainer.checkpoint import Checkpointer
    from dtjob_trainer.sharded import ShardedState, save_sharded

    root, where = checkpoint_root(tmp, int(record["checkpoint_gib"] * GIB))
    record["checkpoint_storage"] = where
    with workspace("gpu-claims-ckpt-", root) as work:
        ck = Checkpointer(work, keep=1)
        state = ShardedState(stepper.model, stepper.optimizer)
        saver = AsyncSaver(ck, state, "FSDP", 0, 1)
        saves: list[dict[str, Any]] = []
        record["background_saves"] = saves
        saves.append({"first": True, **background_save(saver, stepper, s, deadline)})
        emit(record)
        # What the next save will take, about: the first's write, without the pinning.
        write = saves[0]["committed_after_seconds"] - saves[0]["start_blocked_loop_seconds"]
        if deadline.left() > 1.5 * write + 2:
            start = time.perf_counter()
            save_sharded(ck, state, stepper.step_no, "FSDP", 0, 1)
            record["blocking_save_seconds"] = round(time.perf_counter() - start, 3)
            stepper.step()  # the next save is of another step
            emit(record)
        if deadline.left() > 1.5 * write + 2:
            saves.append({"first": False, **background_save(saver, stepper, s, deadline)})


def section_async(rehearse: bool, seconds: float, cap_gib: float, tmp: str | None) -> None:
    import torch.distributed as dist

    from dtjob_api.spec import OptimizerSpec
    from dtjob_trainer.launch import free_port
    from dtjob_trainer.optim import build_optimizer
    from dtjob_trainer.speed import enable_tf32

    gpu = on_gpu(rehearse)
    s = GPU_ASYNC if gpu else CPU_ASYNC
    deadline = Deadline(seconds - CHILD_MARGIN_SECONDS)
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    enable_tf32(device)
    address = f"tcp://127.0.0.1:{free_port()}"
    dist.init_process_group("nccl" if gpu else "gloo", init_method=address, rank=0, world_size=1)
    model = fsdp_gpt(s, device)
    params = sum(p.numel() for p in model.parameters())
    optimizer = build_optimizer(model.parameters(), OptimizerSpec(type="AdamW", lr=1e-4))
    x = torch.randint(0, s.vocab, (s.batch, s.seq_len), device=device)
    stepper = Stepper(model, optimizer, x, torch.roll(x, -1, dims=1), device)
    record: dict[str, Any] = {
        **section_header(rehearse),
        "model": f"FSDP2 GPT {s.layers} x dModel {s.d_model}, seqLen {s.seq_len}, vocab {s.vocab}",
        "parameters": params,
        # Parameters and Adam's two moments, fp32.
        "checkpoint_gib": round(3 * 4 * params / GIB, 3),
        "batch": s.batch,
        "optimizer": f"AdamW fp32 (fused: {bool(optimizer.defaults.get('fused'))})",
    }
    stepper.steps(s.warmup)
    record["step_seconds_no_save"] = seconds_summary(stepper.steps(s.steps))
    emit(record)
    saves_in_flight(record, stepper, s, deadline, tmp)
    saves = record["background_saves"]
    base = record["step_seconds_no_save"]["median"]
    during = saves[-1]["step_seconds_during"].get("median")
    if during:
        record["step_slowdown_during_save"] = round(during / base, 3)
    emit(record)
    dist.destroy_process_group()


# --- the parent: run the children, collect, write ---------------------------------------

RUNNERS: dict[str, Callable[[bool, float, float, str | None], None]] = {
    "hetero": section_hetero,
    "ps": section_ps,
    "async": section_async,
}


def last_json(text: str) -> dict[str, Any] | None:
    """The last line of `text` that is a whole JSON object."""
    for line in reversed(text.strip().splitlines()):
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    return None


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def child(section: str, seconds: float, args: argparse.Namespace) -> dict[str, Any]:
    """Run one section in a fresh process (a session of its own, so its launches can be
    ended with it) for at most `seconds`: its record, with {"error": ...} when it died or
    ran out of time (keeping what it had measured)."""
    cmd = [sys.executable, __file__, "--one", section, "--seconds", f"{seconds:.0f}"]
    cmd += ["--cap-gib", str(args.cap_gib)] + (["--rehearse"] if args.rehearse else [])
    if args.tmp:
        cmd += ["--tmp", args.tmp]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env=trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=seconds)
        error = None
    except subprocess.TimeoutExpired:
        proc.terminate()  # the child ends its launch in flight, then itself
        try:
            stdout, stderr = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = _text(exc.stdout), _text(exc.stderr)
            proc.wait()
        error = f"timed out after {seconds:.0f} s"
    # Its stderr (with every launch's output) beside the record, for a post-mortem.
    log = args.out.with_name(f"{args.out.stem}-{section}.log")
    log.write_text(stderr)
    record = last_json(stdout) or {}
    record["log"] = log.name
    if error is None and proc.returncode < 0:
        error = f"killed by signal {-proc.returncode}"
    elif error is None and proc.returncode != 0:
        error = (stderr.strip().splitlines() or [f"exit {proc.returncode}, no output"])[-1]
    if error is not None:
        record["error"] = error[:300]
    record["section_seconds"] = round(time.monotonic() - start, 1)
    return record


def machine() -> dict[str, Any]:
    """What the figures were taken on."""
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / GIB, 1))
    return info


def shares(sections: list[str]) -> Iterator[tuple[str, float]]:
    """Each section with its share of what is left when it starts (by NOMINAL_SECONDS):
    time a section leaves unused goes to the ones after it."""
    for i, section in enumerate(sections):
        rest = sum(NOMINAL_SECONDS[s] for s in sections[i:])
        yield section, NOMINAL_SECONDS[section] / rest


def fmt(value: Any) -> str:
    return "-" if value is None else str(value)


Row = tuple[str, str]


def hetero_rows(het: dict[str, Any]) -> list[Row]:
    alone = het.get("alone", {})
    largest, oom = fmt(alone.get("largest_layers")), fmt(alone.get("first_oom_layers"))
    rows = [
        (
            f"largest GPT on the GPU alone (cap {het.get('cap_gib')} GiB)",
            f"{largest} layers (first OOM: {oom})",
        )
    ]
    for row in het.get("with_cpu_stages", []):
        ok = "trains" if row.get("ok") else row.get("skipped") or row.get("error")
        peak = f", GPU peak {row['gpu_peak_gib']} GiB" if "gpu_peak_gib" in row else ""
        rows.append((f"+ {row['cpu_stages']} CPU stage(s): {row['layers']} layers", ok + peak))
    speed = het.get("speed", {})
    if speed:
        alone = speed.get("alone", {}).get("samples_per_second")
        rate = speed.get("with_1_cpu_stage", {}).get("samples_per_second")
        rows.append(
            (
                f"samples/s alone vs 1 CPU stage ({speed.get('layers')} layers)",
                f"{fmt(alone)} vs {fmt(rate)} (x{fmt(speed.get('ratio'))})",
            )
        )
    return rows


def ps_rows(ps: dict[str, Any]) -> list[Row]:
    rows = []
    for name, row in ps.get("runs", {}).items():
        value = f"{fmt(row.get('samples_per_second'))} ({fmt(row.get('ratio_to_data_parallel'))})"
        if row.get("cut_at_step") is not None:
            value += f", cut at step {row['cut_at_step']}"
        if row.get("samples_per_second") is None:
            value = str(row.get("skipped") or row.get("error"))
        rows.append((f"{name} samples/s (ratio to DataParallel)", value))
    return rows


def async_rows(asy: dict[str, Any]) -> list[Row]:
    if not asy.get("step_seconds_no_save"):
        return []
    last = (asy.get("background_saves") or [{}])[-1]
    during = last.get("step_seconds_during", {}).get("median")
    blocked = f"{fmt(last.get('start_blocked_loop_seconds'))} / "
    return [
        (
            "median step s: no save / background save",
            f"{asy['step_seconds_no_save'].get('median')} / {fmt(during)}",
        ),
        (
            "loop blocked s: background start / blocking",
            blocked + fmt(asy.get("blocking_save_seconds")),
        ),
    ]


TABLE_ROWS: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "hetero": hetero_rows,
    "ps": ps_rows,
    "async": async_rows,
}


def table(record: dict[str, Any]) -> str:
    """A few lines for a person: the figures that answer each claim, and the errors."""
    lines = [f"{'section':8} {'figure':50} value"]
    for section in SECTIONS:
        part = record.get(section)
        if not part:
            continue
        rows = TABLE_ROWS[section](part)
        for key in ("skipped", "error"):
            if key in part:
                rows.append((key.upper(), str(part[key])))
        lines += [f"{section:8} {figure:50} {value}" for figure, value in rows]
    return "\n".join(lines)


def measure(record: dict[str, Any], args: argparse.Namespace, write: Callable[[], None]) -> None:
    """Every section in its own child, sharing the budget; the record written after each."""
    deadline = Deadline(args.budget)
    wanted = [s for s in SECTIONS if s in args.sections.split(",")]
    for section, share in shares(wanted):
        seconds = share * deadline.left()
        if seconds < MIN_CHILD_SECONDS:
            record[section] = {"skipped": f"the budget was spent ({deadline.left():.0f} s left)"}
        else:
            record[section] = child(section, seconds, args)
        write()
    record["seconds"] = round(args.budget - deadline.left(), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=600.0, help="seconds for all")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rehearse", action="store_true", help="tiny sizes on the CPU")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--cap-gib", type=float, default=2.0, help="GPU cap of hetero")
    parser.add_argument("--tmp", default=None, help="where launches and checkpoints go")
    parser.add_argument("--one", choices=SECTIONS, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=60.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        signal.signal(signal.SIGTERM, _stop_running)
        RUNNERS[args.one](args.rehearse, args.seconds, args.cap_gib, args.tmp)
        return
    record: dict[str, Any] = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "rehearsal": not on_gpu(args.rehearse),
        "budget_seconds": args.budget,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        tmp.replace(args.out)

    measure(record, args, write)
    write()
    print(table(record))


if __name__ == "__main__":
    main()
