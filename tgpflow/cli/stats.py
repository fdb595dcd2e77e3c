"""``tgpflow stats``: inspect or add statistics."""

from __future__ import annotations

import json

import click

from tgpflow.cli.app import main, runtime_errors


@main.group()
def stats() -> None:
    """Inspect or combine statistics (a store, or single statistics artifacts)."""


@stats.command("info")
@click.argument("path")
def stats_info(path: str) -> None:
    """Describe a statistics store (its manifest, verified entries) or one statistics artifact."""
    from tgpflow.pipeline.store import StatsStore, load_stats

    with runtime_errors():
        store = StatsStore(path)
        manifest = store.read_manifest()
        if manifest is None:
            st = load_stats(path)
            click.echo(json.dumps({"kind": type(st).__name__, "rows": st.n, "fingerprint": st.fingerprint}))
            return
        # a model without additive statistics (RSR) has no total: it is refitted on the partitions' rows
        totals = {m: {"rows": store.load(v["total"]).n if v.get("total") else None, "version": v.get("version")}
                  for m, v in manifest["models"].items()}
        for part in manifest["partitions"].values():  # verifies every entry's checksums
            for rel in part["stats"].values():
                store.load(rel)
        click.echo(json.dumps({"store": path, "name": manifest["name"], "run": manifest["run"],
                               "policy": manifest["policy"], "partitions": len(manifest["partitions"]),
                               "models": totals, "updated": manifest["updated"]}, indent=2, default=float))


@stats.command("merge")
@click.argument("paths", nargs=-1, required=True)
@click.option("--out", required=True, help="The merged statistics artifact (.zarr or .npz), written atomically.")
def stats_merge(paths: tuple[str, ...], out: str) -> None:
    """Add statistics artifacts of the same feature draw into one (refuses a mismatch)."""
    from tgpflow.pipeline.store import load_stats

    with runtime_errors():
        total = sum(load_stats(p) for p in paths)
        total.save(out)
    click.echo(json.dumps({"merged": list(paths), "out": out, "rows": total.n}, default=float))
