"""hack/oci_push.py against the real registry the real node pulls from (distribution, built
by hack/build-binaries.sh): an image's layers arrive uncompressed under their diff IDs, with
a manifest and config a runtime can use; a second image sends only the layers the registry
lacks; a tag already there sends nothing. The docker CLI is replaced by a script that serves
a `docker save` stream made here (the e2e tier pushes the real images, and the real node's
containerd pulls and runs them)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TOP / "hack"))
import oci_push  # noqa: E402

FAKE_DOCKER = """#!/usr/bin/env bash
case "$1 $2" in
  "image inspect") cat "$FAKE_DOCKER_DIR/$3.inspect.json" ;;
  "save "*) cat "$FAKE_DOCKER_DIR/$2.save.tar" ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"""


def layer(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def write_image(where: Path, name: str, layers: list[bytes]) -> list[str]:
    """`docker image inspect` and `docker save` (Docker 20.10's layout) of an image."""
    diff_ids = [digest(data) for data in layers]
    inspect = [{"Architecture": "amd64", "Os": "linux", "Created": "2026-11-29T00:00:00Z",
                "Config": {"Entrypoint": ["/bin/true"], "Env": ["A=1"], "User": "1000:1000"},
                "RootFS": {"Type": "layers", "Layers": diff_ids}}]  # fmt: skip
    (where / f"{name}.inspect.json").write_text(json.dumps(inspect))
    with tarfile.open(where / f"{name}.save.tar", "w") as tar:
        # Directories named by v1 ids, which do not sort in the layers' order.
        for i, data in reversed(list(enumerate(layers))):
            info = tarfile.TarInfo(f"{hashlib.sha256(f'{name}{i}'.encode()).hexdigest()}/layer.tar")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        manifest = json.dumps([{"Config": "c.json", "Layers": []}]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    return diff_ids


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    build = [str(TOP / "hack" / "build-binaries.sh"), "registry"]
    bins = subprocess.run(build, capture_output=True, text=True, check=True).stdout.split()[-1]
    root = tmp_path_factory.mktemp("registry")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / "config.yml").write_text(
        f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {root / 'data'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen([f"{bins}/registry", "serve", str(root / "config.yml")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 30
    while True:
        try:
            opener.open(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "registry did not start"
            time.sleep(0.1)
    yield f"127.0.0.1:{port}"
    proc.kill()
    proc.wait()


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "docker").write_text(FAKE_DOCKER)
    (tmp_path / "bin" / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_DIR", str(tmp_path))
    return tmp_path


def get(url: str, accept: str = "") -> bytes:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with opener.open(req, timeout=10) as resp:
        return bytes(resp.read())


def test_an_image_arrives_uncompressed_and_a_runtime_can_read_it(
    registry: str, docker: Path
) -> None:
    layers = [layer({"usr/lib/big.so": os.urandom(3 << 20)}), layer({"app/main.py": b"print(1)\n"})]
    diff_ids = write_image(docker, "img", layers)
    assert "2 of 2 layers sent" in oci_push.push("img", f"{registry}/team/app:v1")
    manifest = json.loads(get(f"http://{registry}/v2/team/app/manifests/v1", oci_push.MANIFEST))
    assert manifest["mediaType"] == oci_push.MANIFEST
    assert [(x["mediaType"], x["digest"]) for x in manifest["layers"]] == [
        (oci_push.LAYER, d) for d in diff_ids
    ]
    for entry, data in zip(manifest["layers"], layers, strict=True):
        assert entry["size"] == len(data)
        assert get(f"http://{registry}/v2/team/app/blobs/{entry['digest']}") == data
    config = json.loads(get(f"http://{registry}/v2/team/app/blobs/{manifest['config']['digest']}"))
    assert config["rootfs"] == {"type": "layers", "diff_ids": diff_ids}
    assert config["config"] == {"User": "1000:1000", "Env": ["A=1"], "Entrypoint": ["/bin/true"]}


def test_a_rebuilt_image_sends_only_its_new_layers_and_a_pushed_tag_nothing(
    registry: str, docker: Path
) -> None:
    base = [layer({"usr/lib/torch.so": os.urandom(4 << 20)}), layer({"etc/a": b"a"})]
    write_image(docker, "v1", base)
    assert "2 of 2 layers sent" in oci_push.push("v1", f"{registry}/trainer:one")
    new_code = layer({"src/train.py": b"changed\n"})
    write_image(docker, "v2", [*base, new_code])
    # The 4 MB layer streams past (hashed, checked) but is not sent again.
    assert "1 of 3 layers sent" in oci_push.push("v2", f"{registry}/trainer:two")
    assert oci_push.push("v2", f"{registry}/trainer:two") == "already there"
    manifest = json.loads(get(f"http://{registry}/v2/trainer/manifests/two", oci_push.MANIFEST))
    assert manifest["layers"][-1]["digest"] == digest(new_code)


def test_a_missing_image_is_docker_saves_own_words(registry: str, docker: Path) -> None:
    (docker / "gone.inspect.json").write_text(json.dumps([{"Architecture": "amd64", "Os": "linux",
        "RootFS": {"Layers": [digest(b"never pushed")]}}]))  # fmt: skip
    (docker / "bin" / "docker").write_text(
        FAKE_DOCKER.replace(
            'cat "$FAKE_DOCKER_DIR/$2.save.tar"', 'echo "no such image" >&2; exit 1'
        )
    )
    with pytest.raises(oci_push.PushError, match="docker save gone: no such image"):
        oci_push.push("gone", f"{registry}/x:y")
