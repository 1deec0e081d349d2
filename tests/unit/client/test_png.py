"""The PNG writer (the plot extra): a valid PNG with one marker per recorded loss, each at
the point's own coordinates, and the plotted points kept in the file's text chunk."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from PIL import Image

from dtjob_client.errors import DtjobError
from dtjob_client.history import History, HistoryPoint
from dtjob_client.render.png import MARKER, POINTS_KEY, SIZE, plot_coordinates, write_png


def history(n: int) -> History:
    return History(tuple(HistoryPoint(10 * (i + 1), 2.0 / (i + 1)) for i in range(n)), stride=1)


def chunks(data: bytes) -> list[bytes]:
    """Chunk types, each chunk's CRC checked: a valid PNG by its own spec."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, kinds = 8, []
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        crc = int.from_bytes(data[pos + 8 + length : pos + 12 + length], "big")
        assert zlib.crc32(kind + body) == crc, kind
        kinds.append(kind)
        pos += 12 + length
    return kinds


@pytest.mark.parametrize("rows", [1, 2, 37, 512])
def test_one_marker_per_history_row(tmp_path: Path, rows: int) -> None:
    h = history(rows)
    path = tmp_path / "loss.png"
    assert write_png(h, path, title="job") == rows
    kinds = chunks(path.read_bytes())
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == SIZE
        plotted = json.loads(image.text[POINTS_KEY])
        rgb = image.convert("RGB")
        centres = plot_coordinates(h.losses)
        assert all(rgb.getpixel(xy) == MARKER for xy in centres)
    assert plotted == [[p.step, p.loss] for p in h.points]
    assert len(set(centres)) == rows  # distinct points, none drawn on top of another


def test_rows_without_a_loss_are_not_plotted(tmp_path: Path) -> None:
    h = History((HistoryPoint(1, 1.0), HistoryPoint(2, None, accuracy=0.5), HistoryPoint(3, 0.5)))
    assert write_png(h, tmp_path / "p.png", title="job") == 2


def test_an_empty_history_is_an_error_not_an_empty_picture(tmp_path: Path) -> None:
    with pytest.raises(DtjobError, match="no loss recorded yet"):
        write_png(History(), tmp_path / "p.png", title="old-job")
    assert not (tmp_path / "p.png").exists()
