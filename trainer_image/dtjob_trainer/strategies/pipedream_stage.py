"""One stage of an asynchronous pipeline: runs the actions of pipedream_schedule with
explicit point-to-point sends of activations (forward) and gradients (backward) to the
neighbouring stage ranks, and a store of stashed weight versions.

torch.distributed.pipelining has no weight stashing (its stages compute with the live
parameters), hence this driver. A forward computes with a stored version through
`torch.func.functional_call`, so the live parameters can be updated while micro-batches
that used an older version are still in flight; the backward differentiates that same
graph, i.e. with the stashed weights, never the live ones.

Sends are non-blocking (waited for at the end of each pass), receives block: the 1F1B
order's data dependencies then form no cycle, so no rank waits on one that waits on it.
Every tensor travels as a fixed-size header (shape, dtype) and its payload, which lets a
stage receive any activation shape (training and evaluation chunks) without knowing the
model's other stages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.func import functional_call

from dtjob_trainer.strategies.pipedream_schedule import Action, Op

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64]
_HEADER = 8  # ndim, up to 6 dims, dtype code


@dataclass
class Trace:
    """What a stage did, per micro-batch of one step (for tests): the version and a
    checksum of the weights its forward and its backward computed with."""

    forward: dict[int, tuple[int, float]] = field(default_factory=dict)
    backward: dict[int, tuple[int, float]] = field(default_factory=dict)
    updates: list[int] = field(default_factory=list)
    peak_versions: int = 0


class PipeDreamStage:
    """The weight store and point-to-point pipeline of one stage rank.

    `optimizer_step()` is called with the live parameters' .grad set; it is the only way
    the live weights change."""

    def __init__(
        self,
        module: nn.Module,
        stage: int,
        num_stages: int,
        device: torch.device,
        loss_fn: LossFn,
        optimizer_step: Callable[[], None],
        autocast: Callable[[], object] | None = None,
        wire: torch.device | None = None,
    ) -> None:
        self.module = module
        # Where sent and received tensors live: the compute device, except a GPU stage
        # talking gloo to CPU stages (gloo's point-to-point moves host memory only).
        self.wire = wire or device
        self.stage = stage
        self.num_stages = num_stages
        self.device = device
        self.loss_fn = loss_fn
        self.optimizer_step = optimizer_step
        self.autocast = autocast
        self.names = [n for n, _ in module.named_parameters()]
        self.params = [p for _, p in module.named_parameters()]
        self.live_version = 0
        self.store: dict[int, list[torch.Tensor]] = {}
        self.trace: Trace | None = None

    @property
    def is_first(self) -> bool:
        """Feeds the inputs."""
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        """Computes the loss."""
        return self.stage == self.num_stages - 1

    # -- the store ----------------------------------------------------------------------

    def stash(self, version: int) -> None:
        """Copy the live weights, which must be at `version`, into the store."""
        if self.live_version != version:
            raise RuntimeError(
                f"stage {self.stage}: stash of version {version} but the live weights are "
                f"at {self.live_version}"
            )
        self.store[version] = [p.detach().clone() for p in self.params]

    def stored(self) -> dict[int, dict[str, torch.Tensor]]:
        """The stashed versions by parameter name (for checkpoints)."""
        return {v: dict(zip(self.names, ts, strict=True)) for v, ts in self.store.items()}

    def restore(self, live_version: int, stored: dict[int, dict[str, torch.Tensor]]) -> None:
        """Set the version counter and the store after the live weights were loaded."""
        self.live_version = live_version
        self.store = {
            v: [
                ts[n].to(self.device, p.dtype) for n, p in zip(self.names, self.params, strict=True)
            ]
            for v, ts in stored.items()
        }

    # -- one step -----------------------------------------------------------------------

    def run(
        self, actions: list[Action], x: torch.Tensor | None, y: torch.Tensor | None, parts: int
    ) -> list[torch.Tensor]:
        """Run one step's `actions` on the batch split into `parts` micro-batches (x on the
        first stage, y on the last). Returns the micro-batch losses (last stage only)."""
        xs = list(x.chunk(parts)) if x is not None and self.is_first else []
        ys = list(y.chunk(parts)) if y is not None and self.is_last else []
        pending: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        grads: dict[int, list[torch.Tensor]] = {}
        # A flush (one update with the step's mean gradient) sums each micro-batch's
        # gradient into one buffer as it comes: kept apart until the update, the stage
        # held one gradient per micro-batch in flight and two more copies at the sum.
        flush = not any(a.op == Op.UPDATE and a.microbatch is not None for a in actions)
        accumulated: list[torch.Tensor] | None = None
        done: set[int] = set()
        losses: list[torch.Tensor] = []
        sends: list[dist.Work] = []
        for a in actions:
            if a.op == Op.STASH:
                self.stash(a.version)
            elif a.op == Op.DROP:
                del self.store[a.version]
            elif a.op == Op.FORWARD:
                assert a.microbatch is not None
                inp = xs[a.microbatch] if self.is_first else self._recv(self.stage - 1)
                inp_grad = None if self.is_first else inp.requires_grad_()
                weights = self._weights(a.version)
                out = self._forward(weights, inp)
                if self.is_last:
                    out = self.loss_fn(out, ys[a.microbatch])
                    losses.append(out.detach())
                else:
                    sends += self._send(out.detach(), self.stage + 1)
                pending[a.microbatch] = (out, inp_grad)
                self._record("forward", a, weights)
            elif a.op == Op.BACKWARD:
                assert a.microbatch is not None
                out, inp_grad = pending.pop(a.microbatch)
                weights = self._weights(a.version)
                upstream = None if self.is_last else self._recv(self.stage + 1)
                wrt = [*weights, inp_grad] if inp_grad is not None else weights
                got = torch.autograd.grad(out, wrt, grad_outputs=upstream, allow_unused=True)
                if inp_grad is not None:
                    sends += self._send(got[-1], self.stage - 1)
                # got ends with the input's gradient (when there is an input): not strict.
                g = [
                    torch.zeros_like(w) if d is None else d
                    for w, d in zip(weights, got, strict=False)
                ]
                self._record("backward", a, weights)
                if a.microbatch in done:
                    raise RuntimeError(f"micro-batch {a.microbatch} backward twice")
                done.add(a.microbatch)
                if not flush:
                    grads[a.microbatch] = g
                elif accumulated is None:
                    accumulated = g
                else:
                    torch._foreach_add_(accumulated, g)
            else:  # UPDATE
                if a.microbatch is not None:
                    update = grads.pop(a.microbatch)
                else:  # the step's mean gradient: equal to the full batch's
                    assert accumulated is not None
                    torch._foreach_div_(accumulated, parts)
                    update, accumulated = accumulated, None
                self._apply(update, a.version)
        for work in sends:
            work.wait()
        if pending or grads or accumulated is not None:
            raise RuntimeError(f"stage {self.stage}: the step ended with work in flight")
        return losses

    @torch.no_grad()
    def forward_only(self, x: torch.Tensor | None) -> torch.Tensor | None:
        """The live model's output for x (given on the first stage), on the last stage."""
        inp = x if self.is_first else self._recv(self.stage - 1)
        assert inp is not None
        out = self.module(inp)
        if self.is_last:
            return out  # type: ignore[no-any-return]
        for work in self._send(out, self.stage + 1):
            work.wait()
        return None

    # -- pieces -------------------------------------------------------------------------

    def _weights(self, version: int) -> list[torch.Tensor]:
        if version not in self.store:
            raise RuntimeError(f"stage {self.stage}: weight version {version} is not stored")
        return [w.requires_grad_() for w in self.store[version]]

    def _forward(self, weights: list[torch.Tensor], inp: torch.Tensor) -> torch.Tensor:
        params = dict(zip(self.names, weights, strict=True))
        if self.autocast is None:
            return functional_call(self.module, params, (inp,))  # type: ignore[no-any-return]
        with self.autocast():  # type: ignore[attr-defined]
            return functional_call(self.module, params, (inp,))  # type: ignore[no-any-return]

    def _apply(self, update: list[torch.Tensor], version: int) -> None:
        for p, g in zip(self.params, update, strict=True):
            p.grad = g.to(p.dtype)
        self.optimizer_step()
        for p in self.params:
            p.grad = None
        self.live_version = version
        if self.trace is not None:
            self.trace.updates.append(version)

    def _record(self, kind: str, a: Action, weights: list[torch.Tensor]) -> None:
        if self.trace is None:
            return
        assert a.microbatch is not None
        checksum = float(sum(w.detach().double().sum().item() for w in weights))
        getattr(self.trace, kind)[a.microbatch] = (a.version, checksum)
        self.trace.peak_versions = max(self.trace.peak_versions, len(self.store))

    def _send(self, t: torch.Tensor, dst: int) -> list[dist.Work]:
        t = t.to(self.wire).contiguous()
        header = torch.zeros(_HEADER, dtype=torch.int64, device=t.device)
        header[0] = t.dim()
        header[1 : 1 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
        header[-1] = _DTYPES.index(t.dtype)
        works = [dist.isend(header, dst), dist.isend(t, dst)]
        return [w for w in works if w is not None]

    def _recv(self, src: int) -> torch.Tensor:
        header = torch.empty(_HEADER, dtype=torch.int64, device=self.wire)
        dist.recv(header, src)
        ndim = int(header[0])
        shape = [int(d) for d in header[1 : 1 + ndim].tolist()]
        buf = torch.empty(shape, dtype=_DTYPES[int(header[-1])], device=self.wire)
        dist.recv(buf, src)
        return buf.to(self.device)
