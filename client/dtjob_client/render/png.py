"""The loss curve as a PNG (the `plot` extra: Pillow). Each recorded point is a marker of
MARKER colour centred on `plot_coordinates()`; the points are also kept in the PNG's text
chunk `dtjob.points` ([[step, loss], ...]) so a reader can check what was plotted."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dtjob_client.errors import DtjobError
from dtjob_client.history import History

SIZE = (800, 480)
MARGIN = (80, 30, 30, 50)  # left, top, right, bottom
MARKER = (214, 39, 40)
LINE = (31, 119, 180)
AXIS = (60, 60, 60)
GRID = (225, 225, 225)
POINTS_KEY = "dtjob.points"


def plot_coordinates(
    points: Sequence[tuple[int, float]], size: tuple[int, int] = SIZE
) -> list[tuple[int, int]]:
    """Pixel centre of each (step, loss) inside the plot area."""
    left, top, right, bottom = MARGIN
    w, h = size[0] - left - right, size[1] - top - bottom
    steps = [s for s, _ in points]
    losses = [v for _, v in points]
    s0, s1 = min(steps), max(steps)
    lo, hi = min(losses), max(losses)
    out = []
    for step, loss in points:
        x = left + (w // 2 if s1 == s0 else round((step - s0) / (s1 - s0) * w))
        y = top + (h // 2 if hi == lo else round((hi - loss) / (hi - lo) * h))
        out.append((x, y))
    return out


def write_png(history: History, path: str | Path, title: str, size: tuple[int, int] = SIZE) -> int:
    """Write the loss curve to `path`; returns the number of points plotted."""
    try:
        from PIL import Image, ImageDraw, PngImagePlugin
    except ImportError:
        raise DtjobError(
            "PNG output needs Pillow: pip install 'dtjob-client[plot]' (or plot in the terminal "
            "without --output)"
        ) from None
    points = history.losses
    if not points:
        raise DtjobError(f"{title}: no loss recorded yet, nothing to plot")
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = MARGIN
    x1, y1 = size[0] - right, size[1] - bottom
    _grid_and_labels(draw, points, size)
    draw.rectangle((left, top, x1, y1), outline=AXIS)
    xy = plot_coordinates(points, size)
    if len(xy) > 1:
        draw.line(xy, fill=LINE, width=2)
    for x, y in xy:  # after the line, so each point's centre shows the marker colour
        draw.rectangle((x - 2, y - 2, x + 2, y + 2), fill=MARKER)
    draw.text((left, 8), f"{title}: loss by step (stride {history.stride})", fill=AXIS)
    info = PngImagePlugin.PngInfo()
    info.add_text(POINTS_KEY, json.dumps([[s, v] for s, v in points]))
    image.save(Path(path), format="PNG", pnginfo=info)
    return len(points)


def _grid_and_labels(draw: Any, points: Sequence[tuple[int, float]], size: tuple[int, int]) -> None:
    left, top, right, bottom = MARGIN
    x1, y1 = size[0] - right, size[1] - bottom
    steps = [s for s, _ in points]
    losses = [v for _, v in points]
    lo, hi = min(losses), max(losses)
    for i in range(5):
        y = top + round(i * (y1 - top) / 4)
        draw.line((left, y, x1, y), fill=GRID)
        value = hi - i * (hi - lo) / 4
        draw.text((8, y - 6), f"{value:.4g}", fill=AXIS)
    draw.text((left, y1 + 8), str(min(steps)), fill=AXIS)
    last = str(max(steps))
    draw.text((x1 - 8 * len(last), y1 + 8), last, fill=AXIS)
    draw.text(((left + x1) // 2 - 12, y1 + 24), "step", fill=AXIS)
