"""Container paths a spec names (checkpoint.mountPath, trainer.codePath, the trainer's
volume mounts), held to one rule in both languages: an absolute path written plainly.

The reserved-path checks compare strings. A path spelled `/dev//shm` or `/tmp/../dev/shm`
is the same directory as `/dev/shm` to the kubelet but not to a string comparison, so a
path must first be in its plain form (what `posixpath.normpath` gives, a trailing `/`
allowed): no empty, `.` or `..` component. Then "inside a reserved directory" is a prefix test that
CEL (RE2, no look-ahead) and Python answer alike.
"""

from __future__ import annotations

import posixpath
import re

from dtjob_api.contract import CONFIG_MOUNT_DIR, SHM_MOUNT_PATH

# One component: anything without '/', except "." and "..". RE2 has no look-ahead, so the
# three branches spell "not . or ..": no leading dot; a dot and then not a dot; two dots
# and then at least one more character. ([.], not a backslash: the pattern sits in a CEL
# string literal, where an unknown escape does not compile.)
_COMPONENT = "([^/.][^/]*|[.][^/.][^/]*|[.][.][^/]+)"
PLAIN_PATH = rf"^(/|(/{_COMPONENT})+/?)$"
# Directories only the operator mounts into, and what it mounts there.
RESERVED_DIRS: tuple[tuple[str, str], ...] = (
    (SHM_MOUNT_PATH, "the shared-memory volume"),
    (CONFIG_MOUNT_DIR, "the job config"),
)
_PLAIN = re.compile(PLAIN_PATH)


def is_plain(path: str) -> bool:
    """An absolute path with no empty, '.' or '..' component (a trailing '/' is fine)."""
    return bool(_PLAIN.match(path))


def plain_problem(path: str) -> str | None:
    """Why `path` is not an absolute path written plainly, with the plain form to use."""
    if is_plain(path):
        return None
    if not path.startswith("/"):
        return f"must be an absolute path (got {path!r})"
    return (
        f"must be written plainly, without '//', '.' or '..' components: "
        f"write {normalised(path)!r} (got {path!r})"
    )


def inside(path: str, directory: str) -> bool:
    """`path` is `directory` or below it (both plain, `path` perhaps with a trailing '/')."""
    return (path.rstrip("/") + "/").startswith(directory.rstrip("/") + "/")


def normalised(path: str) -> str:
    """`path` as the kubelet resolves it (posixpath keeps a leading '//'; Linux does not)."""
    plain = posixpath.normpath(path)
    return "/" + plain.lstrip("/") if plain.startswith("/") else plain


def reserved_dir(path: str) -> tuple[str, str] | None:
    """The reserved directory (and what is mounted there) that `path` is at or inside;
    `path` is normalised first, so a crooked spelling is caught too."""
    plain = normalised(path)
    return next(((d, what) for d, what in RESERVED_DIRS if inside(plain, d)), None)


def cel_plain(expr: str) -> str:
    """CEL: the string `expr` is a plain absolute path."""
    return f"{expr}.matches('{PLAIN_PATH}')"


def cel_not_reserved(expr: str) -> str:
    """CEL: the plain path `expr` is outside every reserved directory."""
    return " && ".join(f"{expr} != '{d}' && !{expr}.startsWith('{d}/')" for d, _ in RESERVED_DIRS)
