"""Test files as a queue shared by several pytest processes (`make test`'s unit lane and its
helper, hack/test-lanes.sh): each process runs a file only if it claims it first, so two
processes over the same tree run every file once, and whichever finishes its files early
takes the next. The unit lane's trainer tests compute on every core they get; once a
cluster lane is done, a second process keeps both cores busy instead of one.

Set DTJOB_TEST_CLAIMS to a directory, empty at the start of the run (one file per claimed
test file is created there with O_EXCL: the filesystem is the lock). DTJOB_TEST_CLAIMS_FROM_END=1
takes the files from the end, so two processes meet in the middle rather than racing for
the same files. Without DTJOB_TEST_CLAIMS pytest runs as ever.

A file claimed by the other process is left out whole: its items are never set up, and
each run item's `nextitem` is the next item this process will really run, so module and
package fixtures are torn down exactly as pytest's own loop would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import groupby
from pathlib import Path

import pytest

CLAIMS = "DTJOB_TEST_CLAIMS"
FROM_END = "DTJOB_TEST_CLAIMS_FROM_END"


def claims_dir() -> Path | None:
    value = os.environ.get(CLAIMS)
    return Path(value) if value else None


def claim(directory: Path, file: str) -> bool:
    """True for the one process that creates the claim on `file` first."""
    name = file.replace(os.sep, "__")
    try:
        os.close(os.open(directory / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    return True


def by_file(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """The items in runs of one file each, in order (from the end with FROM_END)."""
    groups = [list(g) for _, g in groupby(items, key=lambda item: str(item.path))]
    return groups[::-1] if os.environ.get(FROM_END) == "1" else groups


def claimed_items(directory: Path, root: Path, items: list[pytest.Item]) -> Iterator[pytest.Item]:
    """This process's items, a file claimed only when its first item is next to run, so
    the look-ahead that `nextitem` needs claims one file ahead at most."""
    for group in by_file(items):
        if claim(directory, os.path.relpath(group[0].path, root)):
            yield from group


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """pytest's main loop (`_pytest.main.pytest_runtestloop`) over the claimed items."""
    directory = claims_dir()
    if directory is None or session.config.option.collectonly:
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} errors during collection")
    directory.mkdir(parents=True, exist_ok=True)
    queue = claimed_items(directory, session.config.rootpath, session.items)
    item = next(queue, None)
    while item is not None:
        nextitem = next(queue, None)
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
        item = nextitem
    return True
