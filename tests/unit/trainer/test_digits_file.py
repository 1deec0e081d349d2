"""The digits are scikit-learn's, read from its data file without importing it (a second of
every trainer process's start-up): exactly what `load_digits` returns."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from sklearn.datasets import load_digits
from unit.trainer.harness import CHILD_PATH

from dtjob_trainer.data import digits_xy


def test_the_file_gives_exactly_what_load_digits_gives() -> None:
    x, y = digits_xy()
    ref_x, ref_y = load_digits(return_X_y=True)
    assert x.dtype == ref_x.dtype and y.dtype == ref_y.dtype
    assert np.array_equal(x, ref_x) and np.array_equal(y, ref_y)
    assert x.shape == (1797, 64)


def test_reading_them_does_not_import_scikit_learn() -> None:
    code = (
        "import sys; from dtjob_trainer.data import digits_xy; x, y = digits_xy(); "
        "print(x.shape[0], 'sklearn' in sys.modules)"
    )
    env = {"PYTHONPATH": ":".join(CHILD_PATH), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["1797", "False"], done.stderr
