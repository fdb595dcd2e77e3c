"""cluster/cron and cluster/systemd: the scheduled refit runs a `tgpflow run` that the CLI accepts, on a
spec that validates, at the Kubernetes CronJob's time."""

import configparser
import shlex
from pathlib import Path

import yaml

from tgpflow.cli import main
from tgpflow.pipeline.spec import load_spec

REPO = Path(__file__).resolve().parents[1]


def _tgpflow_args(words: list[str]) -> list[str]:
    """The arguments after the `…/bin/tgpflow` executable of a shell command line (up to a redirect or `||`)."""
    start = next(i for i, w in enumerate(words) if w.endswith("bin/tgpflow"))
    args = []
    for w in words[start + 1:]:
        if w.startswith((">", "2>")) or w in ("||", "&&", ";", "|"):
            break
        args.append(w)
    return args


def _check_run(args: list[str]) -> None:
    assert args[0] == "run", args
    ctx = main.commands["run"].make_context("run", list(args[1:]))  # a misspelt option raises UsageError
    assert not ctx.params["dry_run"]
    load_spec(REPO / ctx.params["spec_path"], date="2026-11-24")  # the spec ships and validates


def _k8s_schedule() -> str:
    return yaml.safe_load((REPO / "cluster" / "k8s" / "cronjob.yaml").read_text())["spec"]["schedule"]


def test_the_cron_entry_runs_a_valid_tgpflow_run_at_the_cronjobs_time():
    lines = [ln for ln in (REPO / "cluster" / "cron" / "tgpflow-refit.cron").read_text().splitlines()
             if ln.strip() and not ln.startswith("#") and "=" not in ln.split()[0]]
    assert len(lines) == 1, lines
    words = shlex.split(lines[0])
    assert " ".join(words[:5]) == _k8s_schedule() and words[5] == "tgpflow"  # /etc/cron.d: the user field
    assert "flock" in words and "--progress" in words  # no overlap; log lines for the log file
    _check_run(_tgpflow_args(words[6:]))


def test_the_systemd_timer_starts_the_service_that_runs_a_valid_tgpflow_run():
    def unit(name: str) -> configparser.ConfigParser:
        parser = configparser.ConfigParser(interpolation=None, strict=True)
        parser.optionxform = str  # systemd keys are case-sensitive
        parser.read_string((REPO / "cluster" / "systemd" / name).read_text())
        return parser

    service, timer = unit("tgpflow-refit.service"), unit("tgpflow-refit.timer")
    assert timer["Timer"]["Unit"] == "tgpflow-refit.service" and timer["Install"]["WantedBy"] == "timers.target"
    minute, hour = _k8s_schedule().split()[:2]
    assert timer["Timer"]["OnCalendar"] == f"*-*-* {int(hour):02d}:{int(minute):02d}:00"
    assert service["Service"]["Type"] == "oneshot" and service["Service"]["StandardOutput"] == "journal"
    words = shlex.split(service["Service"]["ExecStart"])
    assert words[0].endswith("bin/tgpflow") and Path(service["Service"]["WorkingDirectory"]).is_absolute()
    _check_run(words[1:])
