"""Fault injection: run a ``tgpflow`` command in a child process that is SIGKILLed at one of its write steps.

A *write step* is a rename that makes something visible: ``os.replace`` / ``os.rename`` and the
directory exchange of :mod:`tgpflow.io.atomic` — the atomic swaps of every output, the store's
manifest, a model version's run info and its ``CURRENT`` pointer — whose destination lies under
the test's workspace. Zarr's own per-chunk ``.partial`` renames happen inside a temporary that no
reader sees before the step that publishes it, so they are not steps of their own (killing between
two of them is killing before the next step).

Production code has no hook: the child patches those functions, then calls the real entry point
:func:`tgpflow.cli.main`. A fresh interpreter takes 3–5 s to import tgpflow, so children are forked
from a small server (``python -m tests.faults``) that imported it once: a fork takes milliseconds,
and a suite can afford a child per step. The server is single-threaded when it forks.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["Outcome", "run_cli", "clean_run"]

_ZARR_TEMPORARY = ".partial"
_REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a child did: its exit code (-9: killed), output, and the write steps it took (op, src, dst)."""

    code: int
    stdout: str
    stderr: str
    steps: list[tuple[str, ...]]

    @property
    def killed(self) -> bool:
        return self.code == -signal.SIGKILL


def _install(root: str, kill: int | str | None, when: str, log: str) -> None:
    """Count the write steps under ``root`` (one line each in ``log``) and SIGKILL this process at ``kill``."""
    import tgpflow.io.atomic

    count = 0

    def step(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(src: Any, dst: Any, *a: Any, **kw: Any) -> Any:
            nonlocal count
            if not os.fspath(dst).startswith(root) or os.fspath(src).endswith(_ZARR_TEMPORARY):
                return fn(src, dst, *a, **kw)
            count += 1
            with open(log, "a") as fh:
                fh.write(f"{fn.__name__}\t{os.fspath(src)}\t{os.fspath(dst)}\n")
            hit = kill == count if isinstance(kill, int) else kill is not None and kill in os.fspath(dst)
            if hit and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            result = fn(src, dst, *a, **kw)
            if hit and when == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return wrapper

    os.replace, os.rename = step(os.replace), step(os.rename)
    if hasattr(tgpflow.io.atomic, "exchange"):
        tgpflow.io.atomic.exchange = step(tgpflow.io.atomic.exchange)


def _child(args: list[str], root: str, kill: int | str | None, when: str, log: str, out: str, err: str) -> None:
    """In the forked child: stdout/stderr to files, the hook, then the CLI; never returns."""
    code = 1
    try:
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        _install(root, kill, when, log)
        from tgpflow.cli import main

        main(["--json", *args], prog_name="tgpflow")  # the scripts' output: the tests read its JSON
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported like an uncaught exception of the CLI
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _preload() -> None:
    """Import (and JIT-load) once, in the server, what every command needs."""
    import dask.array  # noqa: F401
    import dask.dataframe  # noqa: F401
    import distributed  # noqa: F401
    import numpy as np
    import pyarrow.parquet  # noqa: F401
    import zarr  # noqa: F401

    import tgpflow
    import tgpflow.cli  # noqa: F401
    import tgpflow.pipeline.runner  # noqa: F401
    import tgpflow.sample  # noqa: F401
    import tgpflow.stats.rsr_kernel  # noqa: F401
    from tgpflow.features.sincos import sincos_rows

    for name in tgpflow.__all__:  # the estimators and statistics (tgpflow imports them on first use)
        getattr(tgpflow, name)

    x = np.zeros((2, 2))
    sincos_rows(x, np.zeros(2), np.empty_like(x), np.empty_like(x))


def serve() -> None:
    """The fork server: one JSON request per stdin line; answers the child's pid, then its exit code."""
    import threading

    _preload()
    assert threading.active_count() == 1, "the fork server must be single-threaded when it forks"
    for line in iter(sys.stdin.readline, ""):
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(**request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)


@functools.cache
def _server() -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "tests.faults"], cwd=_REPO, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    atexit.register(proc.kill)
    return proc


def _answer(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any] | None:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        return None
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line:
        raise RuntimeError("the fault-injection server died")
    return json.loads(line)


def run_cli(args: Sequence[str], root: str | Path, *, kill: int | str | None = None, when: str = "before",
            timeout: float = 120.0) -> Outcome:
    """Run ``tgpflow ARGS`` in a forked child; with ``kill`` (the k-th step, or a substring of its
    destination) SIGKILL it ``when`` = "before" or "after" that step. Only steps under ``root`` count."""
    proc = _server()
    with tempfile.TemporaryDirectory(prefix="tgpflow-fault-") as tmp:
        log, out, err = (os.path.join(tmp, n) for n in ("steps", "out", "err"))
        Path(log).touch()
        request = {"args": list(args), "root": os.fspath(root), "kill": kill, "when": when, "log": log, "out": out,
                   "err": err}
        proc.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        pid = _answer(proc, 60.0)
        if pid is None:
            raise TimeoutError("the fault-injection server did not start a child in 60 s")
        done = _answer(proc, timeout)
        if done is None:
            os.kill(pid["pid"], signal.SIGKILL)
            _answer(proc, 60.0)
            raise TimeoutError(f"tgpflow {' '.join(args)} did not finish in {timeout:g} s")
        steps = [tuple(line.rstrip("\n").split("\t")) for line in open(log)]
        return Outcome(done["code"], Path(out).read_text(), Path(err).read_text(), steps)


def clean_run(args: Sequence[str], root: str | Path) -> Outcome:
    """An uninterrupted ``tgpflow ARGS`` (it must succeed), with its write steps."""
    done = run_cli(args, root)
    assert done.code == 0, done.stderr
    return done


if __name__ == "__main__":
    serve()
