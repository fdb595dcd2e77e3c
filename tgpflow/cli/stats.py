"""``tgpflow stats``: inspect or add statistics."""

from __future__ import annotations

import click

from tgpflow.cli.app import check_out, main, overwrite_option, runtime_errors
from tgpflow.cli.human import number
from tgpflow.cli.output import emit


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
            emit({"kind": type(st).__name__, "rows": st.n, "fingerprint": st.fingerprint},
                 lambda r: [f"{path}: {r['kind']} of {number(r['rows'])} rows (features {r['fingerprint']})"])
            return
        # a model without additive statistics (RSR) has no total: it is refitted on the partitions' rows
        totals = {m: {"rows": store.load(v["total"]).n if v.get("total") else None, "version": v.get("version")}
                  for m, v in manifest["models"].items()}
        for part in manifest["partitions"].values():  # verifies every entry's checksums
            for rel in part["stats"].values():
                store.load(rel)
        emit({"store": path, "name": manifest["name"], "run": manifest["run"], "policy": manifest["policy"],
              "partitions": len(manifest["partitions"]), "models": totals, "updated": manifest["updated"]},
             lambda r: [f"{path}: store of pipeline {r['name']}, run {r['run']} ({r['updated']}), "
                        f"{r['partitions']} partition(s), policy {r['policy']}; checksums verified",
                        *(f"  {m}: {v['version']}, " + (f"{number(v['rows'])} rows" if v["rows"] is not None else
                                                         "no additive statistics (refitted on rows)")
                          for m, v in r["models"].items())], indent=2, default=float)


@stats.command("merge")
@click.argument("paths", nargs=-1, required=True)
@click.option("--out", required=True, help="The merged statistics artifact (.zarr or .npz), written atomically.")
@overwrite_option
def stats_merge(paths: tuple[str, ...], out: str, overwrite: bool) -> None:
    """Add statistics artifacts of the same feature draw into one (refuses a mismatch)."""
    from tgpflow.pipeline.store import load_stats

    check_out(out, "statistics", overwrite)
    with runtime_errors():
        total = load_stats(paths[0])
        for i, p in enumerate(paths[1:], start=1):
            try:
                total = total + load_stats(p)
            except ValueError as exc:  # another draw or kind: name the file that does not add
                raise ValueError(f"{p} does not add to {', '.join(paths[:i])}: {exc}") from None
        total.save(out)
    emit({"merged": list(paths), "out": out, "rows": total.n},
         lambda r: [f"added {len(paths)} statistics artifacts ({number(r['rows'])} rows) → {out}"], default=float)
