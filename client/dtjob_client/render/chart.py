"""The loss curve in a terminal: plain ASCII (any terminal, any locale), one `*` per
recorded point, the y axis labelled at the top, middle and bottom."""

from __future__ import annotations

from dtjob_client.history import History

WIDTH, HEIGHT = 60, 15


def format_chart(history: History, title: str, width: int = WIDTH, height: int = HEIGHT) -> str:
    """The chart of `history.losses`; a one-line note when there is nothing to plot."""
    points = history.losses
    if not points:
        return f"{title}: no loss recorded yet\n"
    steps = [s for s, _ in points]
    losses = [v for _, v in points]
    s0, s1 = min(steps), max(steps)
    lo, hi = min(losses), max(losses)
    grid = [[" "] * width for _ in range(height)]
    for step, loss in points:
        col = 0 if s1 == s0 else round((step - s0) / (s1 - s0) * (width - 1))
        level = 0 if hi == lo else round((loss - lo) / (hi - lo) * (height - 1))
        grid[height - 1 - level][col] = "*"
    # A flat curve sits on the bottom row, the only one labelled.
    labels = (
        {height - 1: lo} if hi == lo else {0: hi, (height - 1) // 2: (hi + lo) / 2, height - 1: lo}
    )
    label_width = max(len(f"{v:.4g}") for v in labels.values())
    lines = [f"{title} (loss by step, {len(points)} points, stride {history.stride})"]
    for i, cells in enumerate(grid):
        label = f"{labels[i]:.4g}" if i in labels else ""
        tick = "+" if i in labels else "|"
        lines.append(f"{label.rjust(label_width)} {tick}{''.join(cells).rstrip()}")
    lines.append(" " * label_width + " +" + "-" * width)
    left, right = str(s0), str(s1)
    gap = max(1, width - len(left) - len(right))
    lines.append(" " * (label_width + 2) + left + " " * gap + right + "  step")
    return "\n".join(lines) + "\n"
