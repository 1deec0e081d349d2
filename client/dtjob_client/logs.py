"""Logs of a job's gang: every pod's trainer container, each line prefixed with its
`<role>-<index>`. With follow, all pods stream at once (one thread each, merged as lines
arrive) until every stream ends."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dtjob_api.contract import TRAINER_CONTAINER
from dtjob_client.kube import refused
from dtjob_client.why import member

# A container that has not started yet answers 400 "... is waiting to start": a followed
# gang that is still starting is waited for, up to this long, instead of giving up.
START_WAIT_SECONDS = 300.0
RETRY_SECONDS = 2.0


@dataclass(frozen=True)
class LogLine:
    """One line of one pod's log (or, with `error`, why that pod has none)."""

    member: str
    """`<role>-<index>`, e.g. worker-1."""
    pod: str
    text: str
    error: bool = False

    def __str__(self) -> str:
        return f"[{self.member}] {self.text}"


def read_logs(
    core: client.CoreV1Api, namespace: str, pods: Sequence[Mapping[str, Any]], follow: bool
) -> Iterator[LogLine]:
    """Lines of every pod, pod after pod; with `follow`, interleaved as they arrive."""
    if not follow:
        for pod in pods:
            yield from _read_all(core, namespace, pod)
        return
    lines: queue.Queue[LogLine | None] = queue.Queue(maxsize=10000)
    stop = threading.Event()
    threads = [
        threading.Thread(target=_follow, args=(core, namespace, pod, lines, stop), daemon=True)
        for pod in pods
    ]
    for t in threads:
        t.start()
    running = len(threads)
    try:
        while running:
            item = lines.get()
            if item is None:
                running -= 1
            else:
                yield item
    finally:
        stop.set()  # the consumer went away: the streams close at their next line


def _read_all(core: client.CoreV1Api, ns: str, pod: Mapping[str, Any]) -> Iterator[LogLine]:
    name, who = str(pod["metadata"]["name"]), member(pod)
    try:
        text = core.read_namespaced_pod_log(name, ns, container=TRAINER_CONTAINER)
    except ApiException as exc:
        yield LogLine(who, name, str(refused(exc)), error=True)
        return
    for line in str(text).splitlines():
        yield LogLine(who, name, line)


def _follow(
    core: client.CoreV1Api,
    ns: str,
    pod: Mapping[str, Any],
    out: queue.Queue[LogLine | None],
    stop: threading.Event,
) -> None:
    name, who = str(pod["metadata"]["name"]), member(pod)
    deadline = time.monotonic() + START_WAIT_SECONDS
    try:
        while not stop.is_set():
            try:
                # Not preloaded: the urllib3 response, read line by line as the pod writes.
                resp: Any = core.read_namespaced_pod_log(
                    name, ns, container=TRAINER_CONTAINER, follow=True, _preload_content=False
                )
            except ApiException as exc:
                starting = exc.status == 400 and "waiting to start" in str(exc.body)
                if starting and time.monotonic() < deadline:
                    stop.wait(RETRY_SECONDS)
                    continue
                out.put(LogLine(who, name, str(refused(exc)), error=True))
                return
            try:
                for raw in resp:
                    if stop.is_set():
                        break
                    out.put(LogLine(who, name, raw.decode("utf-8", "replace").rstrip("\r\n")))
            finally:
                resp.release_conn()
            return
    except Exception as exc:  # a broken connection ends this pod's stream, not the others
        out.put(LogLine(who, name, f"log stream ended: {exc}", error=True))
    finally:
        out.put(None)
