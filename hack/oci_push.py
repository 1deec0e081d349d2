#!/usr/bin/env python3
"""Push a local Docker image to the real node's registry with its layers uncompressed: an
OCI image manifest whose layers are `application/vnd.oci.image.layer.v1.tar`, which
containerd pulls and unpacks like any other. Stdlib only.

Why not `docker push`: it gzips every layer on one core. The trainer image is 5 GB, mostly
one layer of torch and its NVIDIA libraries; its first push took 276 s of a cold `make demo`
on a 2-core machine, and the node's pull then spent CPU undoing the compression. Over
127.0.0.1 there is nothing to save by compressing. A registry across a network is a different
trade: push there with `docker push` (docs/getting-started.md).

What is sent: the layers the registry lacks (`docker save` streams them; each is hashed as it
uploads, since the stream's order is not the image's), a config made from `docker image
inspect` (Docker 20.10's API has no way to the raw one), and the manifest under the tag. A
tag the registry already has is left as it is: tags are content-derived (hack/images.sh).

Usage: hack/oci_push.py IMAGE HOST:PORT/REPOSITORY:TAG   (DOCKER_HOST as for docker)
"""

from __future__ import annotations

import hashlib
import http.client
import json
import subprocess
import sys
import tarfile
import time
from typing import IO, Any
from urllib.parse import urlsplit

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"
CHUNK = 1 << 20
# Layers this small are sent whenever they may be missing: cheap, and their sizes may repeat.
SMALL = 1 << 20
# The image config fields a container runtime reads (OCI image spec, "config").
RUNTIME_FIELDS = ("User", "Env", "Entrypoint", "Cmd", "WorkingDir", "Labels", "ExposedPorts",
                  "Volumes", "StopSignal")  # fmt: skip


class PushError(Exception):
    pass


class Registry:
    """The distribution API of one repository on a plain-HTTP registry."""

    def __init__(self, host: str, repo: str) -> None:
        self.host, self.repo = host, repo

    def _conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, timeout=600)

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = self._conn()
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def blob_size(self, digest: str) -> int | None:
        """The blob's size when the repository has it."""
        status, headers, _ = self.request("HEAD", f"/v2/{self.repo}/blobs/{digest}")
        return int(headers.get("content-length", "0")) if status == 200 else None

    def has_manifest(self, tag: str) -> bool:
        status, _, _ = self.request(
            "HEAD", f"/v2/{self.repo}/manifests/{tag}", headers={"Accept": MANIFEST}
        )
        return status == 200

    def _start_upload(self) -> str:
        status, headers, body = self.request("POST", f"/v2/{self.repo}/blobs/uploads/")
        if status != 202:
            raise PushError(
                f"starting an upload to {self.host}/{self.repo}: {status} {body[:200]!r}"
            )
        return _path(headers["location"])

    def _finish_upload(self, location: str, digest: str, data: bytes = b"") -> None:
        """Commit an upload under its digest, with its last bytes (all of them, for a
        monolithic upload)."""
        sep = "&" if "?" in location else "?"
        status, _, body = self.request(
            "PUT", f"{location}{sep}digest={digest}", data,
            {"Content-Type": "application/octet-stream"},
        )  # fmt: skip
        if status != 201:
            raise PushError(
                f"committing {digest} to {self.host}/{self.repo}: {status} {body[:200]!r}"
            )

    def put_blob(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self.blob_size(digest) is None:
            self._finish_upload(self._start_upload(), digest, data)
        return digest

    def stream_blob(self, source: IO[bytes], size: int) -> str:
        """Upload `size` bytes from `source`, hashing them on the way; their digest."""
        location = self._start_upload()
        conn = self._conn()
        sha = hashlib.sha256()
        try:
            conn.putrequest("PATCH", location)
            conn.putheader("Content-Type", "application/octet-stream")
            conn.putheader("Content-Length", str(size))
            conn.endheaders()
            left = size
            while left:
                chunk = source.read(min(CHUNK, left))
                if not chunk:
                    raise PushError(f"the image stream ended {left} bytes early")
                sha.update(chunk)
                conn.send(chunk)
                left -= len(chunk)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 202:
                raise PushError(f"uploading a layer: {resp.status} {body[:200]!r}")
            location = _path(resp.getheader("Location") or location)
        finally:
            conn.close()
        digest = "sha256:" + sha.hexdigest()
        self._finish_upload(location, digest)
        return digest

    def put_manifest(self, tag: str, manifest: bytes) -> None:
        status, _, body = self.request(
            "PUT", f"/v2/{self.repo}/manifests/{tag}", manifest, {"Content-Type": MANIFEST}
        )
        if status != 201:
            raise PushError(f"writing the manifest {self.repo}:{tag}: {status} {body[:300]!r}")


def _path(location: str) -> str:
    """A Location header (absolute URL or path) as a request path."""
    parts = urlsplit(location)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def config_of(inspect: dict[str, Any]) -> dict[str, Any]:
    """An OCI image config from `docker image inspect`: what a runtime reads, the layers."""
    runtime = inspect.get("Config") or {}
    return {
        "architecture": inspect["Architecture"],
        "os": inspect["Os"],
        "created": inspect.get("Created"),
        "config": {k: runtime[k] for k in RUNTIME_FIELDS if runtime.get(k)},
        "rootfs": {"type": "layers", "diff_ids": list(inspect["RootFS"]["Layers"])},
    }


def manifest_of(config: bytes, config_digest: str, layers: list[tuple[str, int]]) -> bytes:
    return json.dumps({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": LAYER, "digest": d, "size": s} for d, s in layers],
    }).encode()  # fmt: skip


def send_layers(reg: Registry, stream: IO[bytes], missing: set[str], present: dict[str, int]
                ) -> dict[str, int]:  # fmt: skip
    """The missing layers from a `docker save` stream, by digest: their sizes. A layer whose
    size is that of one the registry has is taken to be that one (and checked), unless small."""
    sent: dict[str, int] = {}
    known_sizes = {size: digest for digest, size in present.items() if size >= SMALL}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not missing - sent.keys():
                break  # the rest of the stream is not needed
            if not member.name.endswith("/layer.tar"):
                continue
            data = tar.extractfile(member)
            assert data is not None
            if member.size in known_sizes:
                sha = hashlib.sha256()
                while chunk := data.read(CHUNK):
                    sha.update(chunk)
                if "sha256:" + sha.hexdigest() != known_sizes[member.size]:
                    raise PushError("two layers of one size; push again with docker push")
                continue
            digest = reg.stream_blob(data, member.size)
            sent[digest] = member.size
    if lost := missing - sent.keys():
        raise PushError(f"docker save did not stream the layers {sorted(lost)}")
    return sent


def push(image: str, ref: str) -> str:
    host, _, rest = ref.partition("/")
    repo, _, tag = rest.rpartition(":")
    if not (host and repo and tag):
        raise PushError(f"{ref}: want HOST:PORT/REPOSITORY:TAG")
    reg = Registry(host, repo)
    if reg.has_manifest(tag):
        return "already there"
    out = subprocess.run(["docker", "image", "inspect", image], capture_output=True, text=True)
    if out.returncode != 0:
        raise PushError(f"docker image inspect {image}: {out.stderr.strip()}")
    inspect = json.loads(out.stdout)[0]
    diff_ids: list[str] = list(inspect["RootFS"]["Layers"])
    sizes = {d: reg.blob_size(d) for d in dict.fromkeys(diff_ids)}
    present = {d: s for d, s in sizes.items() if s is not None}
    missing = set(sizes) - present.keys()
    sent: dict[str, int] = {}
    if missing:
        with subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) as save:  # fmt: skip
            assert save.stdout is not None and save.stderr is not None
            try:
                sent = send_layers(reg, save.stdout, missing, present)
            except tarfile.TarError as e:
                err = save.stderr.read().decode(errors="replace").strip()
                raise PushError(f"docker save {image}: {err or e}") from e
            finally:
                save.kill()  # done with it, maybe before its end
    config = json.dumps(config_of(inspect)).encode()
    config_digest = reg.put_blob(config)
    layer_sizes = {**present, **sent}
    reg.put_manifest(
        tag, manifest_of(config, config_digest, [(d, layer_sizes[d]) for d in diff_ids])
    )
    mb = sum(sent.values()) / 1e6
    return f"{len(sent)} of {len(set(diff_ids))} layers sent ({mb:.0f} MB, uncompressed)"


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        said = push(argv[1], argv[2])
    except (PushError, OSError) as e:
        print(f"oci_push: {argv[2]}: {e}", file=sys.stderr)
        return 1
    print(f"oci_push: {argv[2]}: {said} in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
