"""bench/gpu_claims.py's `hetero` section: the heterogeneous pipeline (roles.stage.groups,
docs/strategies.md), a GPU stage under a memory cap alone and behind CPU stages.

A GPT of dModel 1024, 16 heads, seqLen 256, vocab 8192, batch 4 in 4 micro-batches, 1F1B,
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

The cap is the bench-only start-up hook of bench/claims_launch.py (HOOK, its module
docstring), which this section writes for its launches.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from claims_common import (
    CHILD_MARGIN_SECONDS,
    GIB,
    MIB,
    Deadline,
    Row,
    emit,
    fmt,
    on_gpu,
    section_header,
)
from claims_launch import (
    HOOK,
    MIN_LAUNCH_SECONDS,
    Launched,
    finish_job,
    start_job,
    trainer_env,
    workspace,
)

# fp32 weights, gradients and Adam's two moments: bytes a trained parameter holds.
TRAINING_BYTES_PER_PARAMETER = 16


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


GPU_HETERO = HeteroSizes(1024, 16, 256, 8192, 1, 4, 8, 2, 2 * GIB, 128 * MIB, 8, 45.0)
# 1F1B needs a micro-batch per stage at least: 4 for up to 3 stages.
# The rehearsal's: one probe, long launch limits. It runs beside make test's other lanes
# on 2 cores, where one launch of 2 to 3 processes took over 60 s (2026-11-28).
CPU_HETERO = HeteroSizes(64, 4, 32, 256, 1, 4, 4, 2, 3 * MIB, 0, 1, 300.0)


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
