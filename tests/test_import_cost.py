"""Import cost (issue 16): ``import tgpflow`` and ``tgpflow --help`` load neither Numba, scikit-learn's
estimator checks nor distributed; each is imported where it is first used.

Each case runs in a fresh interpreter (this process has imported everything long ago), on the
tree these tests belong to (PYTHONPATH is set from this file's location).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("numba", "distributed", "sklearn.utils.estimator_checks")


def _loaded_after(code: str, heavy: tuple[str, ...] = HEAVY) -> dict:
    """Run ``code`` in a fresh interpreter; which of ``heavy`` it left in ``sys.modules``, and where tgpflow came from."""
    probe = (f"{code}\nimport json, sys, tgpflow\n"
             f"print('\\n' + json.dumps({{'file': tgpflow.__file__, 'loaded': [m for m in {heavy!r} if m in sys.modules]}}))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(report["file"]).resolve() == REPO / "tgpflow" / "__init__.py"  # the tree under test
    return report


HELP = """
from tgpflow.cli import main
try:
    main(["--help"], prog_name="tgpflow")
except SystemExit as exc:
    assert exc.code == 0, exc.code
"""


@pytest.mark.parametrize("code", ["import tgpflow", HELP, "from tgpflow import *"],
                         ids=["import", "cli-help", "public-names"])
def test_importing_tgpflow_and_cli_help_load_no_heavy_module(code):
    assert _loaded_after(code)["loaded"] == []


def test_cli_help_reads_no_parameter_table():
    """``tgpflow fit``'s model options are made from the parameter tables when that command is used, so
    ``tgpflow --help`` imports neither the tables nor pydantic (nor scikit-learn); ``fit --help`` does."""
    light = ("pydantic", "tgpflow.models.params", "sklearn")
    assert _loaded_after(HELP, light)["loaded"] == []
    fit_help = HELP.replace('["--help"]', '["fit", "--help"]')
    assert _loaded_after(fit_help, light)["loaded"] == ["pydantic", "tgpflow.models.params"]


def test_the_probe_sees_a_heavy_import():
    """The check above can fail: the compiled kernels do import Numba, a cluster client distributed."""
    assert _loaded_after("import tgpflow.features.sincos")["loaded"] == ["numba"]
    assert _loaded_after("from tgpflow.cluster import scheduler_address\n"
                         "scheduler_address('tcp://127.0.0.1:8786')")["loaded"] == ["distributed"]


def test_every_public_name_resolves_lazily():
    import tgpflow

    for name in tgpflow.__all__:
        assert getattr(tgpflow, name) is not None
        assert name in dir(tgpflow)
    assert tgpflow.GPTiltedDensity.__module__ == "tgpflow.models.gp_tilted"
    assert tgpflow.errors.ModelFileError.__module__ == "tgpflow.errors"  # submodules as attributes, as before
    with pytest.raises(AttributeError, match="no attribute 'GPTiltedDensitty'"):
        tgpflow.GPTiltedDensitty  # noqa: B018
