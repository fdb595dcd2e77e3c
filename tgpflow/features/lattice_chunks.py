"""A pass's chunks dequantized over their lattices' cells and atoms' blocks (docs/gp_tilted.md, "Integer codes and
other lattices"; the noise and the cells are :mod:`tgpflow.features.lattice`'s)."""

from __future__ import annotations

import numpy as np

from tgpflow.features.lattice import LatticeCells

__all__ = ["dequantize_chunk"]


def dequantize_chunk(validated: tuple[np.ndarray, int, np.ndarray | None], label: str,
                     cells: LatticeCells) -> tuple[np.ndarray, int, np.ndarray | None]:
    """A validated chunk with its discrete columns dequantized (``cells`` in the chunk's units): the noise of a row
    is a function of the chunk's digest and the row's place in it (:mod:`tgpflow.features.lattice`). A value off the
    lattice is a :class:`~tgpflow.errors.SourceError` naming the chunk (``label``) and the column."""
    import hashlib

    from tgpflow.errors import SourceError

    rows, dropped, kept = validated
    k = (rows[:, cells.positions] - cells.origin) / cells.step
    off = np.abs(k - np.round(k)) > 1e-6
    beyond = (np.round(k) < 0) | (np.round(k) > cells.n_steps)
    for bad, what in ((off, "are off the lattice"), (beyond, "lie beyond the lowest or highest point of the lattice")):
        if bad.any():
            j = int(np.flatnonzero(bad.any(axis=0))[0])
            raise SourceError(
                f"{label}: {int(bad[:, j].sum())} values of column {cells.columns[j]!r} (e.g. the row at "
                f"{int(np.flatnonzero(bad[:, j])[0])}, {rows[np.flatnonzero(bad[:, j])[0], cells.positions[j]]:g}) "
                f"{what} that the pilot sample showed ({cells.origin[j]:g}, {cells.origin[j] + cells.step[j]:g}, …, "
                f"{cells.top[j]:g}), so they have no cell: raise pilot_rows so that the pilot sees every value, or "
                f"leave the column out of discrete= (discrete=None fits every column as continuous)")
    for i, j in enumerate(cells.atom_positions):
        beyond = cells.atom_side[i] * (rows[:, j] - cells.atom_value[i]) > 1e-9 * cells.atom_width[i]
        if beyond.any():
            r = int(np.flatnonzero(beyond)[0])
            edge = "lowest" if cells.atom_side[i] < 0 else "highest"
            raise SourceError(
                f"{label}: {int(beyond.sum())} values of column {cells.atom_columns[i]!r} (e.g. the row at {r}, "
                f"{rows[r, j]:g}) lie beyond the {edge} value that the pilot sample showed, {cells.atom_value[i]:g}, "
                f"where it found an atom (a share of the rows exactly there): raise pilot_rows so that the pilot "
                f"sees the column's range, or fit it with discrete=None")
    digest = hashlib.blake2b(np.ascontiguousarray(rows).tobytes(), digest_size=8).digest()
    place = np.arange(rows.shape[0], dtype=np.int64)
    return np.ascontiguousarray(cells.dequantize(rows, place, int.from_bytes(digest, "little"))), dropped, kept
