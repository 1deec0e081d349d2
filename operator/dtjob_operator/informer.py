"""A watch-backed cache of one kind of object (an informer), kept on a thread of its own.

It lists in pages, then watches from the list's resourceVersion with bookmarks, so a quiet
watch that the API server ends (every `watch_seconds`) resumes where it was without a new
list. A resourceVersion the server no longer has (410 Gone, after compaction) lists again;
any other failure retries with backoff, for ever: an outage leaves the last known state in
place, and the watch catches up once the API server answers.

Why our own and not the `kubernetes` package's SharedInformer or kopf's indices: that one
lists in one piece (no limit/continue), sets no bookmarks and keeps deserialised model
objects (several times the memory of the JSON); kopf's handlers see every event but keep
nothing unless we copy it, and cannot be read from a worker thread without its loop. Here
objects stay raw JSON dicts trimmed by `trim` (no managedFields, nothing the operator never
reads), indexed by namespace and by one label.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from urllib3.exceptions import ReadTimeoutError

from dtjob_operator.k8s import Obj
from dtjob_operator.kubehttp import ApiException, HttpClient, iter_lines
from dtjob_operator.rest import collection_path

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace, name); namespace "" for cluster-scoped objects."""

# Reconnect delays after a failed list or watch: short at first (a blip), then capped.
BACKOFFS = (0.5, 1.0, 2.0, 4.0, 8.0)


class ResourceExpired(Exception):
    """The watch's resourceVersion is too old (410): only a new list can go on."""


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def drop_managed_fields(obj: Obj) -> Obj:
    """The smallest trim: managedFields are often half an object and never read."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


# Strings up to this long are shared between the cached objects (keys, label values, phases,
# condition types, node names...): each watch event is parsed on its own, so without it
# every object holds its own copy of every key. Longer strings (messages) are rarely repeated.
SHARED_STRING_MAX = 64


def compact(obj: Any) -> Any:
    """`obj` with its dict keys and short strings interned (equal, and smaller: a trimmed job
    pod takes about half the memory; bench/api_load.py measures the operator's)."""
    if isinstance(obj, dict):
        return {sys.intern(k): compact(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [compact(v) for v in obj]
    if isinstance(obj, str) and len(obj) <= SHARED_STRING_MAX:
        return sys.intern(obj)
    return obj


ListCall = Callable[..., Any]


def lister(api: HttpClient, prefix: str, plural: str) -> ListCall:
    """The list (and watch) call of a collection, namespaced or not: (namespace, query,
    stream, timeout) -> the answer (kubehttp.HttpClient.request)."""

    def call(namespace: str | None, query: list[tuple[str, Any]], stream: bool = False,
             timeout: Any = None) -> Any:  # fmt: skip
        return api.request("GET", collection_path(prefix, namespace, plural), query=query,
                           stream=stream, timeout=timeout)  # fmt: skip

    return call


class Informer:
    """List + watch one resource (optionally label- and field-selected, server side), in
    one namespace or in all (`namespace` None)."""

    def __init__(
        self,
        name: str,
        list_call: ListCall,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        trim: Callable[[Obj], Obj] = drop_managed_fields,
        index_label: str | None = None,
        on_change: Callable[[str, Obj], None] | None = None,
        page_size: int = 500,
        watch_seconds: int = 300,
        connect_timeout: float = 5.0,
        silence_timeout: float = 330.0,
    ) -> None:
        self.name = name
        self._call = list_call
        self._trim = trim
        self._index_label = index_label
        self._on_change = on_change or (lambda _type, _obj: None)
        self._page_size = page_size
        self._watch_seconds = watch_seconds
        self._connect_timeout = connect_timeout
        self._silence_timeout = silence_timeout
        self.label_selector, self.field_selector = label_selector, field_selector
        self._selectors = [("labelSelector", label_selector), ("fieldSelector", field_selector)]
        self.namespace = namespace
        """The one namespace watched, or None for all of them (or cluster-scoped objects)."""
        self._lock = threading.Lock()
        self._store: dict[Key, Obj] = {}
        self._index: dict[Key, set[Key]] = {}
        self._rv: str | None = None
        self._stop = threading.Event()
        self._relist_now = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self.synced = threading.Event()
        """Set once the first list is in; until then readers must ask the API server."""
        self.lists = 0
        """How many full lists were made (the first, then one per 410): for tests."""

    # -- reads (any thread) -------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._store.get((namespace, name))

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._store.values())

    def indexed(self, namespace: str, value: str) -> list[Obj]:
        """Objects of `namespace` whose `index_label` is `value`."""
        with self._lock:
            return [self._store[k] for k in self._index.get((namespace, value), ())]

    def __len__(self) -> int:
        with self._lock:
            return len(self._store)

    # -- the thread -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def relist(self) -> None:
        """List afresh now, cutting the watch short: after the API server was unreachable.
        A watch resumed from its resourceVersion across the API server's restart is the one
        path where a missed event would leave the cache stale with nothing to correct it
        (a job whose pod turned ready as the API server stopped stayed Starting for the 5
        minutes a test waited); a fresh list costs a call per informer and outage."""
        self._relist_now.set()
        resp = self._response
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.shutdown()

    def stop(self) -> None:
        self._stop.set()
        resp = self._response
        if resp is not None:  # unblocks a watch waiting for its next line
            # shutdown(), not close(): close() waits for the lock the reading thread holds.
            with contextlib.suppress(Exception):
                resp.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=2)  # a daemon thread: never hold up a shutdown

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self._rv is None or self._relist_now.is_set():
                    self._relist_now.clear()
                    self._relist()
                self._watch()
                failures = 0
            except ResourceExpired:
                log.info("informer %s: resourceVersion expired; listing again", self.name)
                self._rv = None
            except ReadTimeoutError:
                # A watch silent for silence_timeout (no event, no bookmark): re-opened
                # from where it was, the same as one the API server ended.
                log.debug("informer %s: watch silent; re-opening it", self.name)
            except Exception as exc:  # an informer must outlive any failure
                if self._stop.is_set():
                    return
                if self._relist_now.is_set():  # relist() cut the watch: no failure
                    continue
                delay = BACKOFFS[min(failures, len(BACKOFFS) - 1)]
                failures += 1
                level = logging.INFO if failures == 1 else logging.WARNING
                log.log(level, "informer %s: %s; retrying in %.1fs", self.name,
                        _describe(exc), delay)  # fmt: skip
                if isinstance(exc, ApiException) and exc.status == 410:
                    self._rv = None
                self._stop.wait(delay)

    def _relist(self) -> None:
        """Replace the store by a fresh paginated list; changes are reported as events."""
        items, rv = self._list()
        fresh = {key_of(o): compact(self._trim(o)) for o in items}
        with self._lock:
            old = self._store
            self._store = fresh
            self._index = {}
            for key, obj in fresh.items():
                self._index_add(key, obj)
        self._rv = rv
        self.lists += 1
        self.synced.set()
        for key, obj in old.items():
            if key not in fresh:
                self._on_change("DELETED", obj)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None or _rv_of(before) != _rv_of(obj):
                self._on_change("ADDED" if before is None else "MODIFIED", obj)

    def _list(self) -> tuple[list[Obj], str]:
        items: list[Obj] = []
        token: str | None = None
        while True:
            query = [*self._selectors, ("limit", self._page_size), ("continue", token)]
            try:
                resp = self._call(self.namespace, query)
            except ApiException as exc:
                if exc.status == 410 and token:  # the snapshot paged through is gone
                    items, token = [], None
                    continue
                raise
            body = json.loads(resp.data)
            items.extend(body.get("items") or [])
            meta = body.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    def _watch(self) -> None:
        query = [
            *self._selectors,
            ("watch", True),
            ("resourceVersion", self._rv),
            ("allowWatchBookmarks", True),
            ("timeoutSeconds", self._watch_seconds),
        ]
        # The API server ends the watch after timeoutSeconds: a silence longer than that
        # is a half-open connection, which the read timeout ends.
        resp: Any = self._call(
            self.namespace,
            query,
            stream=True,
            timeout=(self._connect_timeout, self._silence_timeout),
        )
        self._response = resp
        try:
            for event in _events(resp):
                if self._stop.is_set():
                    return
                self._apply(event)
        finally:
            self._response = None
            resp.release_conn()

    def _apply(self, event: Obj) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise ResourceExpired(obj.get("message", ""))
            raise ApiException(status=obj.get("code"), reason=obj.get("message"))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            self._rv = rv or self._rv
            return
        key = key_of(obj)
        trimmed = compact(self._trim(obj))
        with self._lock:
            old = self._store.pop(key, None)
            if old is not None:
                self._index_remove(key, old)
            if kind != "DELETED":
                self._store[key] = trimmed
                self._index_add(key, trimmed)
        self._rv = rv or self._rv
        self._on_change(str(kind), trimmed)

    def _index_add(self, key: Key, obj: Obj) -> None:
        if (value := self._label(obj)) is not None:
            self._index.setdefault((key[0], value), set()).add(key)

    def _index_remove(self, key: Key, obj: Obj) -> None:
        if (value := self._label(obj)) is not None:
            keys = self._index.get((key[0], value))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._index[(key[0], value)]

    def _label(self, obj: Obj) -> str | None:
        if self._index_label is None:
            return None
        labels = (obj.get("metadata") or {}).get("labels") or {}
        value = labels.get(self._index_label)
        return value if isinstance(value, str) else None


def _events(resp: Any) -> Iterator[Obj]:
    for line in iter_lines(resp):
        if line.strip():
            yield json.loads(line)


def _rv_of(obj: Obj) -> object:
    return (obj.get("metadata") or {}).get("resourceVersion")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"API error {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"
