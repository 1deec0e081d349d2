"""Parameter-server protocol over c10d point-to-point (gloo), shared by the asynchronous modes.

The flat parameter vector is split into contiguous shards, one per PS rank. A worker talks to
every PS rank with fixed-size messages `[kind, step (two slots), payload...]` (payload = that
PS rank's shard); a PS rank answers each request (except STOP) with a message of the same size.

A PS rank serves with `dist.recv(buf)` and no source: gloo then receives from whichever
worker sent first and returns its rank, so no worker waits for another (no barrier). Messages
between two ranks stay in order, and a worker never has two requests in flight to the same PS
rank, so every message a PS rank receives is a whole request.

Request kinds and what the PS rank does with the payload:

- PULL: nothing; replies with its shard and, in the step slot, the last step it recorded for
  that worker (so a restarted worker resumes where it left off).
- GRADIENT (Async / Downpour): a gradient; one optimizer step on the shard; replies the shard.
- DELTA (Hogwild pods): a parameter change made locally; added to the shard; replies the shard.
- ELASTIC (asynchronous EASGD): the worker's parameters W_i; the centre moves by
  alpha * (W_i - W_bar) and the reply is the centre from before the move, so worker and centre
  use the same difference and W_i + W_bar is conserved.
- STOP: the worker is done (no reply); the step slot is the step it stopped at, which the PS
  rank records as where the worker resumes. When every worker has stopped, the PS rank sends
  its final shard to rank 0 (kind FINAL), which evaluates the model.

The step a request carries is the step the worker resumes from once the request is applied
(the steps it has completed), so a restart never sends the same update twice.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

HEADER = 3
# Counters travel in two float slots (high and low part) so they stay exact in float32.
_SPLIT = 1 << 12


def _put_count(message: torch.Tensor, value: int) -> None:
    message[1] = float(value // _SPLIT)
    message[2] = float(value % _SPLIT)


def _get_count(message: torch.Tensor) -> int:
    return int(message[1].item()) * _SPLIT + int(message[2].item())


class Kind(enum.IntEnum):
    """Message kinds of the protocol (slot 0 of every message)."""

    PULL = 1
    GRADIENT = 2
    DELTA = 3
    ELASTIC = 4
    STOP = 5
    FINAL = 6


def shard_bounds(numel: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges that split `numel` elements over `shards` PS ranks.

    The first `numel % shards` shards get one element more, as `torch.tensor_split` does.
    """
    if shards < 1:
        raise ValueError("at least one parameter-server shard is needed")
    base, extra = divmod(numel, shards)
    bounds = []
    start = 0
    for i in range(shards):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


@dataclass
class ShardState:
    """What one PS rank holds: its shard of the parameters and its bookkeeping."""

    values: torch.nn.Parameter
    """The shard (the optimizer of GRADIENT requests steps it in place)."""
    applied: int = 0
    """Requests that changed the shard (GRADIENT, DELTA, ELASTIC)."""
    worker_steps: dict[int, int] = field(default_factory=dict)
    """Last step each worker reported, by rank: where a restarted worker resumes."""


class ShardServer:
    """Applies protocol requests to one shard. Kept apart from the receive loop so the update
    rules can be used (and checked) without processes."""

    def __init__(
        self,
        state: ShardState,
        optimizer: torch.optim.Optimizer | None = None,
        elastic_alpha: float = 0.0,
    ) -> None:
        self.state = state
        self.optimizer = optimizer
        self.elastic_alpha = elastic_alpha

    def handle(self, kind: Kind, src: int, step: int, payload: torch.Tensor) -> torch.Tensor:
        """Apply one request from worker `src` and return the reply payload."""
        values = self.state.values
        if kind is Kind.PULL:
            return values.detach().clone()
        if kind is Kind.GRADIENT:
            if self.optimizer is None:
                raise RuntimeError("GRADIENT request to a PS rank without an optimizer")
            values.grad = payload.clone()
            self.optimizer.step()
            reply = values.detach().clone()
        elif kind is Kind.DELTA:
            with torch.no_grad():
                values.add_(payload)
            reply = values.detach().clone()
        elif kind is Kind.ELASTIC:
            reply = values.detach().clone()
            with torch.no_grad():
                values.add_(payload - reply, alpha=self.elastic_alpha)
        else:
            raise ValueError(f"unexpected request kind {kind!r} from rank {src}")
        self.state.applied += 1
        self.state.worker_steps[src] = step
        return reply


def serve(
    server: ShardServer,
    workers: Sequence[int],
    final_to: int | None = 0,
    after_update: Callable[[ShardState], None] | None = None,
    group: dist.ProcessGroup | None = None,
) -> ShardState:
    """Serve requests until every rank in `workers` has sent STOP; returns the final state.

    `after_update` runs after each applied request (checkpointing). When `final_to` is set the
    final shard is sent to that rank, which must call `PSClient.final()`. `group` must be a
    gloo group (receiving from any source is a gloo feature); None is the default group.
    """
    values = server.state.values
    numel = values.numel()
    request = torch.empty(HEADER + numel, dtype=values.dtype)
    reply = torch.empty_like(request)
    stopped: set[int] = set()
    while len(stopped) < len(workers):
        src = dist.recv(request, group=group)
        kind = Kind(int(request[0].item()))
        step = _get_count(request)
        if kind is Kind.STOP:
            # Where the worker really stopped: with local steps after its last update
            # (EASGD between exchanges, a Hogwild pod's final push) the last request's step
            # is behind it, and a restart from there would redo them.
            server.state.worker_steps[src] = step
            stopped.add(src)
            continue
        payload = server.handle(kind, src, step, request[HEADER:])
        reply[0] = float(kind)
        _put_count(reply, server.state.worker_steps.get(src, 0))
        reply[HEADER:] = payload
        dist.send(reply, dst=src, group=group)
        if kind is not Kind.PULL and after_update is not None:
            after_update(server.state)
    if final_to is not None:
        reply[0] = float(Kind.FINAL)
        _put_count(reply, server.state.applied)
        reply[HEADER:] = values.detach()
        dist.send(reply, dst=final_to, group=group)
    return server.state


class PSClient:
    """A worker's side of the protocol: one request to every PS rank, then their replies."""

    def __init__(
        self,
        ps_ranks: Sequence[int],
        numel: int,
        dtype: torch.dtype,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        self.ps_ranks = list(ps_ranks)
        self.group = group
        self.bounds = shard_bounds(numel, len(self.ps_ranks))
        self.numel = numel
        self.dtype = dtype
        self.requests = 0
        """Requests that change parameters (GRADIENT, DELTA, ELASTIC) sent to each PS rank."""
        self.last_steps: list[int] = []
        """Step slots of the latest replies, one per PS rank."""
        self._buffers = [
            (torch.empty(HEADER + e - s, dtype=dtype), torch.empty(HEADER + e - s, dtype=dtype))
            for s, e in self.bounds
        ]

    def exchange(self, kind: Kind, step: int, flat: torch.Tensor | None = None) -> torch.Tensor:
        """Send `flat` (sharded) with `kind` to every PS rank; return the concatenated replies."""
        works = []
        for ps, (start, end), (out, _) in zip(
            self.ps_ranks, self.bounds, self._buffers, strict=True
        ):
            out[0] = float(kind)
            _put_count(out, step)
            if flat is None:
                out[HEADER:] = 0.0
            else:
                out[HEADER:] = flat[start:end]
            works.append(dist.isend(out, dst=ps, group=self.group))
        result = torch.empty(self.numel, dtype=self.dtype)
        self.last_steps = []
        for ps, (start, end), (_, back) in zip(
            self.ps_ranks, self.bounds, self._buffers, strict=True
        ):
            dist.recv(back, src=ps, group=self.group)
            self.last_steps.append(_get_count(back))
            result[start:end] = back[HEADER:]
        for work in works:
            if work is not None:
                work.wait()
        if kind is not Kind.PULL:
            self.requests += 1
        return result

    def pull(self) -> tuple[torch.Tensor, int]:
        """Current parameters, and the step this worker resumes from (0 on a fresh start)."""
        flat = self.exchange(Kind.PULL, 0)
        return flat, min(self.last_steps)

    def stop(self, step: int) -> None:
        """Tell every PS rank that this worker is done, at `step` (steps completed)."""
        works = []
        for ps, (out, _) in zip(self.ps_ranks, self._buffers, strict=True):
            out[0] = float(Kind.STOP)
            _put_count(out, step)
            works.append(dist.isend(out, dst=ps, group=self.group))
        for work in works:
            if work is not None:
                work.wait()

    def final(self) -> tuple[torch.Tensor, int]:
        """Rank 0 only, after every worker stopped: the final parameters and the updates the
        PS ranks applied (summed over PS ranks)."""
        result = torch.empty(self.numel, dtype=self.dtype)
        applied = 0
        for ps, (start, end), (_, back) in zip(
            self.ps_ranks, self.bounds, self._buffers, strict=True
        ):
            dist.recv(back, src=ps, group=self.group)
            if int(back[0].item()) != Kind.FINAL:
                raise RuntimeError(f"PS rank {ps} sent {int(back[0].item())}, expected FINAL")
            applied += _get_count(back)
            result[start:end] = back[HEADER:]
        return result, applied
