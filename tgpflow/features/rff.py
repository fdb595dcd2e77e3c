"""Random Fourier features of the GP-tilted density (docs/mathematics.md, "Features and the pilot pass").

``φ(x) = √(2/S) cos(Z x/γ + c)``, ``φ'(x) = −√(2/S) sin(Z x/γ + c)`` with
``z_s ~ N(0, Σ_z)``, ``c_s ~ U[0, 2π)``. A draw is a value: Z, c, γ and the pilot shift
x₀ define it, its fingerprint identifies it, and it is saved with every model and every
statistics object computed from it.

Numerics (docs/mathematics.md, "Features and the pilot pass"): features are evaluated at ``x − x₀`` with the shifted
phase ``c' = (c + Z x₀/γ) mod 2π`` formed in float64, since ``cos(Zx/γ + c) = cos(Z(x−x₀)/γ + c')``;
at ``‖x‖ ~ 10⁶`` the raw angle would lose its phase. All arithmetic here is float64.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Any

import numpy as np

from tgpflow.core.backend import device_of, is_numpy, namespace
from tgpflow.features.digest import array_hash

__all__ = ["RandomFourierFeatures", "scott_bandwidth", "paper_kernel_cov", "evaluation_threads"]

#: Rows per task of the fused evaluation kernels (:meth:`RandomFourierFeatures.cos_sin_sums`): large enough that a
#: task's dispatch is noise (~4 ms of trigonometry at S = 1000), small enough to balance the cores.
TASK_ROWS = 4096
#: :meth:`RandomFourierFeatures.cos_features` goes to several threads from this many values (features × rows) on.
FEATURE_SPLIT_VALUES = 2**20

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0  # its threads (ThreadPoolExecutor keeps its own count private)
_POOL_LOCK = threading.Lock()


def evaluation_threads() -> int:
    """Threads for evaluating rows in this call: the cores this process may use when called from the main
    thread, else 1 — inside a Dask task (threaded scheduler or a distributed worker) the scheduler already
    runs one task per core, and a pool per task would oversubscribe them."""
    if threading.current_thread() is not threading.main_thread():
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _over_rows(task: Any, n: int, step: int, threads: int | None) -> None:
    """``task(lo)`` for every ``lo`` in ``range(0, n, step)``: on the evaluation pool with ``threads`` threads
    (default :func:`evaluation_threads`) when there are several ranges, else in this thread."""
    starts = range(0, n, step)
    threads = evaluation_threads() if threads is None else max(1, int(threads))
    if threads == 1 or len(starts) <= 1:
        for lo in starts:
            task(lo)
    else:
        list(_pool(threads).map(task, starts))


def _pool(threads: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < threads:
            _POOL, _POOL_SIZE = ThreadPoolExecutor(threads, thread_name_prefix="tgpflow-eval"), threads
        return _POOL


def _frozen(a: Any, shape: tuple[int, ...] | None, name: str) -> np.ndarray:
    arr = np.array(a, dtype=np.float64, copy=True)
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}; got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} has non-finite values")
    arr.setflags(write=False)
    return arr


#: The cached values derived from a draw, left out of its pickle (:meth:`RandomFourierFeatures.__getstate__`).
_DERIVED = ("frequencies", "phase", "_abs_frequencies")


@dataclasses.dataclass(frozen=True, eq=False)
class RandomFourierFeatures:
    """An explicit draw of S random Fourier features in d dimensions.

    Parameters
    ----------
    Z : (S, d) array — frequencies (rows z_s).
    c : (S,) array — phases in [0, 2π).
    gamma : float — kernel width γ > 0.
    shift : (d,) array, optional — pilot shift x₀ about which the moment-type sums are
        accumulated (docs/mathematics.md, "Features and the pilot pass"); zeros when not given. It is part of the
        fingerprint, because statistics accumulated about different shifts do not add up.
    seed : int, optional — the seed the draw came from (informational only).
    """

    Z: np.ndarray
    c: np.ndarray
    gamma: float
    shift: np.ndarray | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        Z = np.asarray(self.Z)
        if Z.ndim != 2 or Z.shape[0] < 1 or Z.shape[1] < 1:
            raise ValueError(f"Z must be a non-empty (S, d) array; got shape {Z.shape}")
        S, d = Z.shape
        object.__setattr__(self, "Z", _frozen(Z, (S, d), "Z"))
        object.__setattr__(self, "c", _frozen(self.c, (S,), "c"))
        gamma = float(self.gamma)
        if not (math.isfinite(gamma) and gamma > 0):
            raise ValueError(f"gamma must be a finite positive number; got {self.gamma!r}")
        object.__setattr__(self, "gamma", gamma)
        shift = np.zeros(d) if self.shift is None else self.shift
        object.__setattr__(self, "shift", _frozen(shift, (d,), "shift"))

    # -- identity ---------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return int(self.Z.shape[0])

    @property
    def n_dims(self) -> int:
        return int(self.Z.shape[1])

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 of (S, d, Z, c, γ, x₀) as little-endian float64 bytes."""
        return array_hash(b"tgpflow.RandomFourierFeatures.v1", self.Z.shape,
                          (self.Z, self.c, np.array([self.gamma]), self.shift)).hexdigest()

    def describe(self) -> str:
        seed = "" if self.seed is None else f", seed={self.seed}"
        return (f"RandomFourierFeatures(n_features={self.n_features}, d={self.n_dims}, "
                f"gamma={self.gamma:.6g}{seed}, fingerprint={self.fingerprint[:12]})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RandomFourierFeatures):
            return NotImplemented
        return self.fingerprint == other.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return self.describe()

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle holds (Dask sends the statistics that carry this draw between workers): Z, c, γ, x₀, the
        seed and the fingerprint, not the derived W, |W| and c' (two more S×d arrays, recomputed when used)."""
        return {k: v for k, v in self.__dict__.items() if k not in _DERIVED}

    # -- derived constants --------------------------------------------------------------
    @cached_property
    def frequencies(self) -> np.ndarray:
        """W = Z/γ (S, d)."""
        w = self.Z / self.gamma
        w.setflags(write=False)
        return w

    @cached_property
    def phase(self) -> np.ndarray:
        """Shifted phase c' = (c + Z x₀/γ) mod 2π, in float64 (docs/mathematics.md, "Features and the pilot pass")."""
        p = np.mod(self.c + self.frequencies @ self.shift, 2.0 * np.pi)
        p.setflags(write=False)
        return p

    @cached_property
    def _abs_frequencies(self) -> np.ndarray:
        return np.abs(self.frequencies)

    # -- construction -----------------------------------------------------------------
    @classmethod
    def draw(
        cls,
        n_features: int,
        *,
        bandwidth: float,
        kernel_cov: np.ndarray | None = None,
        n_dims: int | None = None,
        shift: np.ndarray | None = None,
        random_state: int | np.random.Generator | None = None,
    ) -> RandomFourierFeatures:
        """Draw Z ~ N(0, kernel_cov) (identity when None) and c ~ U[0, 2π), Z first.

        ``kernel_cov`` is Σ_z; the paper's default is ``paper_kernel_cov(Σ) = dΣ/tr Σ``.
        """
        if kernel_cov is None:
            if n_dims is None:
                raise ValueError("give n_dims when kernel_cov is None")
            chol = np.eye(int(n_dims))
        else:
            kernel_cov = np.asarray(kernel_cov, dtype=np.float64)
            try:
                chol = np.linalg.cholesky(kernel_cov)
            except np.linalg.LinAlgError as exc:
                raise ValueError(
                    "the kernel covariance Σ_z = dΣ/tr Σ is not positive definite: a column "
                    "is constant or columns are collinear; drop such columns, or pass "
                    "kernel_cov='identity'"
                ) from exc
        S, d = int(n_features), chol.shape[0]
        if S < 1:
            raise ValueError(f"n_features must be >= 1; got {n_features}")
        seed = random_state if isinstance(random_state, (int, np.integer)) else None
        rng = np.random.default_rng(random_state)
        Z = rng.standard_normal((S, d)) @ chol.T
        c = rng.uniform(0.0, 2.0 * np.pi, size=S)
        return cls(Z=Z, c=c, gamma=float(bandwidth), shift=shift, seed=None if seed is None else int(seed))

    def with_bandwidth(self, gamma: float) -> RandomFourierFeatures:
        """The same draw (Z, c, x₀) at another width γ — e.g. γ_σ = √(γ² + σ²) of NCFD (docs/mathematics.md,
        "Noise-conditional Fisher divergence")."""
        return RandomFourierFeatures(self.Z, self.c, gamma, self.shift, seed=self.seed)

    # -- evaluation -------------------------------------------------------------------
    def sincos(self, x_shifted: Any) -> tuple[Any, Any]:
        """sin and cos of ``W (x − x₀)ᵀ + c'`` as two (S, n) arrays, for a block of rows.

        ``x_shifted`` is the (n, d) block minus ``shift``, in any array-API namespace.
        NumPy blocks take the compiled kernel (float64, see ``sincos``); others, and NumPy
        blocks whose angles could exceed the kernel's exact range, use ``xp.sin``/``xp.cos``.
        """
        xp = namespace(x_shifted)
        if is_numpy(xp):
            from tgpflow.features.sincos import sincos_rows  # Numba: imported when first used

            xs = np.asarray(x_shifted)
            angle = self.frequencies @ xs.T  # (S, n), C-contiguous
            if self.in_kernel_range(xs):
                sin = np.empty_like(angle)
                cos = np.empty_like(angle)
                sincos_rows(angle, self.phase, sin, cos)
                return sin, cos
            angle += self.phase[:, None]
            return np.sin(angle), np.cos(angle)
        dev = device_of(x_shifted)  # the rows' device (a strict namespace refuses to mix two)
        W = xp.asarray(self.frequencies, device=dev)
        angle = W @ xp.matrix_transpose(x_shifted) + xp.asarray(self.phase, device=dev)[:, None]
        return xp.sin(angle), xp.cos(angle)

    def cos_sin_sums(self, X: Any, cos_weights: np.ndarray, sin_weights: np.ndarray, *, block_rows: int = 4096,
                     threads: int | None = None) -> tuple[Any, Any]:
        """``cos(A)ᵀ C`` (n, kc) and ``sin(A)ᵀ B`` (n, ks) for the angles ``A = W (x − x₀)ᵀ + c'`` of the rows of X,
        without forming the (S, n) blocks: FD's θᵀφ(x) is ``√(2/S) cos(A)ᵀθ``, its score ``−√(2/S)/γ sin(A)ᵀ(θ ⊙ Z)``.

        NumPy rows take the fused compiled kernel (``sincos``: the same float64 polynomials as the pass), in tasks
        of :data:`TASK_ROWS` rows on ``threads`` threads (default :func:`evaluation_threads`); memory is
        O(n (d + kc + ks)). Other namespaces, and NumPy tasks whose angles could exceed the kernel's exact range,
        form :meth:`sincos` blocks of ``block_rows`` rows and multiply them.
        """
        xp = namespace(X)
        C = np.ascontiguousarray(cos_weights, dtype=np.float64).reshape(self.n_features, -1)
        B = np.ascontiguousarray(sin_weights, dtype=np.float64).reshape(self.n_features, -1)
        n = int(X.shape[0])
        if not is_numpy(xp):
            dev = device_of(X)
            Cx, Bx, shift = (xp.asarray(a, device=dev) for a in (C, B, self.shift))
            parts_c, parts_s = [], []
            for start in range(0, n, block_rows):
                sin, cos = self.sincos(X[start:min(start + block_rows, n), ...] - shift)
                parts_c.append(xp.matrix_transpose(cos) @ Cx)
                parts_s.append(xp.matrix_transpose(sin) @ Bx)
            if not parts_c:
                return (xp.zeros((0, C.shape[1]), dtype=xp.float64, device=dev),
                        xp.zeros((0, B.shape[1]), dtype=xp.float64, device=dev))
            return xp.concat(parts_c, axis=0), xp.concat(parts_s, axis=0)
        from tgpflow.features.sincos import cos_sin_sums_rows  # Numba: imported when first used

        X = np.asarray(X, dtype=np.float64)
        out_c = np.zeros((C.shape[1], n))
        out_s = np.zeros((B.shape[1], n))

        def task(start: int) -> None:
            stop = min(start + TASK_ROWS, n)
            xt = np.ascontiguousarray((X[start:stop] - self.shift).T)
            if self.in_kernel_range(xt.T):
                cos_sin_sums_rows(xt, self.frequencies, self.phase, C, B, out_c[:, start:stop], out_s[:, start:stop])
                return
            for lo in range(0, stop - start, block_rows):  # beyond the kernel's exact range: NumPy's libm
                sin, cos = self.sincos(xt.T[lo:lo + block_rows])
                out_c[:, start + lo:start + lo + sin.shape[1]] = C.T @ cos
                out_s[:, start + lo:start + lo + sin.shape[1]] = B.T @ sin

        _over_rows(task, n, TASK_ROWS, threads)
        return out_c.T, out_s.T

    def cos_features(self, X: np.ndarray, out: np.ndarray | None = None, *, threads: int | None = None) -> np.ndarray:
        """φ(X)ᵀ = √(2/S) cos(A) as an (S, n) C-contiguous array (an (n, S) Fortran-ordered φ(X) once transposed),
        for NumPy rows: the fused kernel within its exact range, else :meth:`sincos`. ``out``: a buffer to fill.
        ``threads`` (default :func:`evaluation_threads`): the features go to that many threads in ranges (the
        kernel releases the GIL), since the callers' products after it use every core too."""
        from tgpflow.features.sincos import cos_rows  # Numba: imported when first used

        X = np.asarray(X, dtype=np.float64)
        n = X.shape[0]
        out = np.empty((self.n_features, n)) if out is None else out
        xt = np.ascontiguousarray((X - self.shift).T)
        scale = math.sqrt(2.0 / self.n_features)
        if self.in_kernel_range(xt.T):
            threads = evaluation_threads() if threads is None else max(1, int(threads))
            S = self.n_features
            # split by features, not rows: a range of out's rows is C-contiguous, and the kernel's fused store
            # vectorises only into a contiguous block (into a strided view of columns it ran at half the rate)
            step = S if n * S < FEATURE_SPLIT_VALUES else -(-S // threads)

            def task(lo: int) -> None:
                cos_rows(xt, self.frequencies[lo:lo + step], self.phase[lo:lo + step], scale, out[lo:lo + step])

            _over_rows(task, S, step, threads)
        else:
            out[...] = self.sincos(xt.T)[1]
            out *= scale
        return out

    def in_kernel_range(self, xs: np.ndarray) -> bool:
        """Whether every angle ``W xᵀ + c'`` of the shifted rows ``xs`` (n, d) is within the compiled sincos
        kernels' exact range (:data:`tgpflow.features.sincos.MAX_ANGLE`), by a cheap upper bound of |angle|."""
        bound = float((self._abs_frequencies @ np.abs(xs).max(axis=0, initial=0.0)).max()) + 2 * np.pi
        return bound < _max_angle()

    def transform(self, X: Any) -> tuple[Any, Any]:
        """φ(X) and φ'(X) as (n, S) arrays (docs/mathematics.md, "Conventions")."""
        xp = namespace(X)
        scale = math.sqrt(2.0 / self.n_features)
        sin, cos = self.sincos(X - xp.asarray(self.shift, device=device_of(X)))
        return scale * xp.matrix_transpose(cos), -scale * xp.matrix_transpose(sin)

    # -- storage ----------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"Z": self.Z, "c": self.c, "gamma": np.array(self.gamma), "shift": self.shift}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], seed: int | None = None) -> RandomFourierFeatures:
        return cls(Z=arrays["Z"], c=arrays["c"], gamma=float(arrays["gamma"]), shift=arrays["shift"], seed=seed)


def _max_angle() -> float:
    from tgpflow.features.sincos import MAX_ANGLE  # Numba: imported when first used

    return MAX_ANGLE


def scott_bandwidth(n_rows: int, cov: np.ndarray) -> float:
    """Scott's rule of [Paisley et al.] §IV: γ = N^{−1/(d+4)} √(tr Σ / d) (docs/mathematics.md, "Features and the pilot
    pass")."""
    d = cov.shape[0]
    tr = float(np.trace(cov))
    if not tr > 0:
        raise ValueError("Scott's bandwidth needs data with non-zero spread (tr Σ = 0)")
    return float(n_rows) ** (-1.0 / (d + 4)) * math.sqrt(tr / d)


def paper_kernel_cov(cov: np.ndarray) -> np.ndarray:
    """Σ_z = d Σ / tr Σ, [Paisley et al.] §IV (docs/mathematics.md, "Features and the pilot pass" and "Where the papers
    differ", item A6)."""
    d = cov.shape[0]
    return d * cov / float(np.trace(cov))
