"""The API server's own count of the requests it served (`apiserver_request_total`), read
from its /metrics: what the at-rest load test and bench/api_load.py measure the operator by.

WATCH (and WATCHLIST, CONNECT) requests are left out: an open watch is one request however
long it lasts, and an informer's watch is what replaces polling. The metric has no client
label, so a caller isolates the operator by comparing a window with it running against one
without it, by (verb, resource, group)."""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from collections import Counter

from kubernetes import client

LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Key = tuple[str, str, str]  # (verb, resource[/subresource], group)


def request_counts(api: client.ApiClient) -> Counter[Key]:
    """apiserver_request_total summed over codes, scopes and versions, WATCHes left out."""
    method, url, headers, body, _ = api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    resp = api.call_api(method, url, headers, body)
    resp.read()
    counts: Counter[Key] = Counter()
    for line in resp.data.decode().splitlines():
        m = LINE.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m["labels"]))
        verb = labels.get("verb", "")
        if verb in ("WATCH", "WATCHLIST", "CONNECT"):
            continue
        resource = labels.get("resource", "") or "(non-resource)"
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[(verb, resource, labels.get("group", ""))] += int(float(m["value"]))
    return counts


def window(api: client.ApiClient, seconds: float) -> Counter[Key]:
    """The requests served over the next `seconds` (this call's own two GETs of /metrics
    are in the (non-resource) row)."""
    before = request_counts(api)
    time.sleep(seconds)
    after = request_counts(api)
    after.subtract(before)
    return after


def per_second(counts: Counter[Key], seconds: float) -> dict[str, float]:
    """`counts` as requests per second by "VERB resource (group)", largest first."""
    rows = {
        f"{verb} {resource}" + (f" ({group})" if group else ""): round(n / seconds, 2)
        for (verb, resource, group), n in counts.items()
        if n
    }
    return dict(sorted(rows.items(), key=lambda kv: -abs(kv[1])))


OPERATOR_SAMPLE = re.compile(r"^dtjob_api_requests_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for an operator's metrics endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def requests_sent(port: int) -> Counter[tuple[str, str]]:
    """The requests an operator serving its metrics on `port` has sent so far, by its own
    client's count (`dtjob_api_requests_total`), by (verb, resource), WATCHes left out."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    counts: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        m = OPERATOR_SAMPLE.match(line)
        if m:
            labels = dict(LABEL.findall(m["labels"]))
            if labels["verb"] != "WATCH":
                counts[(labels["verb"], labels["resource"])] += int(float(m["value"]))
    return counts


def admission_passes(port: int) -> tuple[int, float]:
    """(passes, seconds spent in them) of an operator serving its metrics on `port`, from
    its dtjob_admission_pass_duration_seconds histogram."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    count, total = 0, 0.0
    for line in text.splitlines():
        if line.startswith("dtjob_admission_pass_duration_seconds_count"):
            count = int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("dtjob_admission_pass_duration_seconds_sum"):
            total = float(line.rsplit(" ", 1)[1])
    return count, total
