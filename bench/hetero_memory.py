"""Memory figure of the heterogeneous pipeline (roles.stage.groups): the largest GPT that
trains on G accelerator stages alone vs with k CPU stages in front of them, under the same
accelerator memory cap.

There is no accelerator on this machine, so the cap is EMULATED: a per-process byte budget
on what a stage holds, measured rather than guessed. For each block of the trainer's GPT
(embedding, transformer blocks, head) we measure, in this process:

- training state: parameters + gradients + Adam's two moments = 4 x the parameter bytes;
- activations: the bytes autograd saves for backward in one micro-batch's forward of the
  block (saved-tensor hooks, unique storages).

A stage s of S under 1F1B holds min(S - s, M) micro-batches' activations, so its bytes are
sum(4 x params) + min(S - s, M) x sum(activations) over its blocks. A model fits a layout
(k CPU stages with the host budget, then G accelerator stages with the cap) when its blocks
split contiguously so every stage holds at least one block and stays within its budget
(greedy from the front: each stage takes as many blocks as fit; exact for this check). The
largest fitting `layers` is reported for k = 0 (all on the accelerators), 1 and 2, and the
k = 1 model is then trained for 2 steps by the real trainer (`launch`, CPU processes,
gloo, one group per stage with the measured split) to show the split runs.

    PYTHONPATH=trainer_image:api python bench/hetero_memory.py [--cap-mib 8] [--host-mib 64]

Writes bench/results/hetero_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import yaml

from dtjob_trainer.config import load_config
from dtjob_trainer.models import build_model

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "hetero_memory.json"
MIB = 2**20
GPT = {"type": "GPT", "dModel": 128, "heads": 4, "seqLen": 32, "vocabSize": 512}


def spec(
    layers: int, batch: int, microbatches: int, groups: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A Pipeline job of a GPT with `layers` blocks (one stage unless `groups` are given)."""
    stage: dict[str, Any] = {"replicas": len(groups) if groups else 1}
    if groups:
        stage["groups"] = groups
    return {
        "strategy": {
            "type": "Pipeline",
            "pipeline": {"schedule": "1F1B", "microbatches": microbatches},
        },
        "roles": {"stage": stage},
        "trainer": {
            "model": {**GPT, "layers": layers},
            "dataset": {"type": "SyntheticTokens", "samples": 256},
            "optimizer": {"type": "Adam", "lr": 1e-3},
            "batchSize": batch,
            "steps": 2,
            "logEverySteps": 1,
        },
        "checkpoint": {"everySteps": 1000},
    }


def block_bytes(layers: int, micro: int) -> list[tuple[int, int]]:
    """(training-state bytes, activation bytes of one micro-batch) per block, measured."""
    cfg = load_config(spec(layers, micro, 1))
    model = build_model(cfg)
    h: torch.Tensor = torch.randint(0, GPT["vocabSize"], (micro, GPT["seqLen"]))
    out = []
    for block in model.children():
        state = 4 * sum(p.numel() * p.element_size() for p in block.parameters())
        seen: dict[int, int] = {}

        def pack(t: torch.Tensor, seen: dict[int, int] = seen) -> torch.Tensor:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
            return t

        inp = h.detach().requires_grad_(h.is_floating_point())
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = block(inp)
        # The block's input is the previous block's output (already counted there) or
        # the token ids: count what the block itself adds.
        seen.pop(inp.untyped_storage().data_ptr(), None)
        out.append((state, sum(seen.values())))
        h = y.detach()
    return out


def fits(blocks: list[tuple[int, int]], budgets: list[int], microbatches: int) -> list[int] | None:
    """Blocks per stage of a contiguous split within the budgets, or None."""
    stages, sizes, i = len(budgets), [], 0
    for s, budget in enumerate(budgets):
        inflight = min(stages - s, microbatches)
        used, j = 0, i
        while j < len(blocks) - (stages - s - 1):
            state, act = blocks[j]
            if used + state + inflight * act > budget:
                break
            used += state + inflight * act
            j += 1
        if j == i:
            return None
        sizes.append(j - i)
        i = j
    return sizes if i == len(blocks) else None


def largest(
    cpu_stages: int, accel: int, cap: int, host: int, micro: int, microbatches: int
) -> dict[str, Any]:
    budgets = [host] * cpu_stages + [cap] * accel
    best: dict[str, Any] = {"layers": 0}
    for layers in range(1, 400):
        sizes = fits(block_bytes(layers, micro), budgets, microbatches)
        if sizes is None:
            if layers > best["layers"] + 3:  # bytes grow with layers: stop past the edge
                break
            continue
        params = sum(
            p.numel() for p in build_model(load_config(spec(layers, micro, 1))).parameters()
        )
        best = {"layers": layers, "parameters": params, "blocks_per_stage": sizes}
    return best


def train(layers: int, sizes: list[int], cpu_stages: int, batch: int, microbatches: int) -> int:
    groups = [
        {"name": f"{'cpu' if s < cpu_stages else 'acc'}{s}", "replicas": 1, "blocks": b}
        for s, b in enumerate(sizes)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.yaml"
        path.write_text(yaml.safe_dump({"spec": spec(layers, batch, microbatches, groups)}))
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO / "trainer_image"), str(REPO / "api"), env.get("PYTHONPATH", "")]
        )
        cmd = [sys.executable, "-m", "dtjob_trainer", "launch", str(path)]
        return subprocess.run(
            [*cmd, "--checkpoint-dir", str(Path(tmp) / "ckpt")], env=env, check=False
        ).returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cap-mib", type=float, default=8.0, help="emulated accelerator cap")
    parser.add_argument("--host-mib", type=float, default=64.0, help="budget of a CPU stage")
    parser.add_argument("--accelerators", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--microbatches", type=int, default=4)
    args = parser.parse_args()
    cap, host = int(args.cap_mib * MIB), int(args.host_mib * MIB)
    micro = args.batch // args.microbatches
    rows = {}
    for k in (0, 1, 2):
        rows[f"cpu_stages_{k}"] = largest(k, args.accelerators, cap, host, micro, args.microbatches)
        print(k, rows[f"cpu_stages_{k}"], flush=True)
    one = rows["cpu_stages_1"]
    rc = train(one["layers"], one["blocks_per_stage"], 1, args.batch, args.microbatches)
    result = {
        "what": "largest GPT (layers) trainable: k CPU stages + G accelerator stages, 1F1B",
        "emulated": "no accelerator here: the cap is a per-process budget on measured "
        "training-state (4 x parameter bytes, Adam) + saved-activation bytes",
        "accelerator_cap_mib": args.cap_mib,
        "cpu_stage_budget_mib": args.host_mib,
        "accelerator_stages": args.accelerators,
        "model": GPT,
        "batch": args.batch,
        "microbatches": args.microbatches,
        "largest": rows,
        "trained_cpu_stages_1_model_rc": rc,
        "host": platform.node(),
        "torch": torch.__version__,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
