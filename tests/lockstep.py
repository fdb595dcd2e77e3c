"""Run ``tgpflow ARGS`` with the statistics store's lock under a test's control (two runs at once, in lockstep).

``python -m tests.lockstep GATE ROLE ARGS…``, GATE a directory of signal files:

* ``holder``: once this run holds the store lock it touches ``GATE/held`` and waits for ``GATE/go``
  (at most 120 s) before going on — another run started meanwhile certainly finds the lock taken;
* ``waiter``: tries the store lock once without waiting; when another run holds it, touches
  ``GATE/blocked``, then waits for it as the spec says (``lock_timeout``) — so the test knows this
  run reached the lock while it was held, and really waited.

Production code has no hook: the child patches filelock's ``FileLock.acquire``, then calls the real
entry point :func:`tgpflow.cli.main`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

_STORE_LOCK = os.sep + ".lock"


def _gate(gate: Path, role: str) -> None:
    from filelock import FileLock, Timeout

    real = FileLock.acquire

    def acquire(self: Any, timeout: float | None = None, *args: Any, **kwargs: Any) -> Any:
        if not str(self.lock_file).endswith(_STORE_LOCK):
            return real(self, timeout, *args, **kwargs)
        if role == "waiter":
            try:
                return real(self, 0)
            except Timeout:
                (gate / "blocked").touch()
            return real(self, timeout, *args, **kwargs)
        held = real(self, timeout, *args, **kwargs)
        (gate / "held").touch()
        deadline = time.monotonic() + 120
        while not (gate / "go").exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{gate / 'go'} did not appear in 120 s")
            time.sleep(0.01)
        return held

    FileLock.acquire = acquire  # type: ignore[method-assign]


if __name__ == "__main__":
    gate_dir, role, *args = sys.argv[1:]
    if role not in ("holder", "waiter"):
        raise SystemExit(f"role must be holder or waiter; got {role!r}")
    _gate(Path(gate_dir), role)
    from tgpflow.cli import main

    main(args, prog_name="tgpflow")
