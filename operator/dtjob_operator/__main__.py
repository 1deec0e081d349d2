"""`dtjob-operator` / `python -m dtjob_operator`: run the operator against the current cluster."""

from __future__ import annotations

import sys

# kopf imports the `kubernetes` client whenever it is installed, only to recognise that
# client's model objects in helpers the operator never hands them to: the operator speaks
# the API's JSON itself (kubehttp.py). Kept out, the process is some 20 MiB smaller. The
# operator's image does not install that package; a development venv (the tests use it)
# does, hence this, before anything imports kopf.
sys.modules.setdefault("kubernetes", None)  # type: ignore[arg-type]

from dtjob_operator.run import main  # noqa: E402

__all__ = ["main"]

if __name__ == "__main__":
    main()
