import pickle

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import zarr
from sklearn.utils.estimator_checks import parametrize_with_checks

import tgpflow
from tgpflow.errors import DiagnosticWarning
from tgpflow import GPTiltedDensity, RandomFourierFeatures
from tgpflow.errors import ModelFileError
from tests.conftest import write_parquet


@pytest.mark.parametrize("method", ["fd", "fvpd"])
def test_grad_log_density_matches_finite_differences(gaussian_mix, method):
    est = GPTiltedDensity(method=method, n_features=64).fit(gaussian_mix)
    x = gaussian_mix[::60]
    h = 1e-5
    fd = np.empty_like(x)
    for j in range(x.shape[1]):
        e = np.zeros(x.shape[1])
        e[j] = h
        fd[:, j] = (est.log_density(x + e) - est.log_density(x - e)) / (2 * h)
    np.testing.assert_allclose(est.grad_log_density(x), fd, rtol=1e-6, atol=1e-7)


@pytest.fixture
def same_rows(tmp_path, rng):
    X = rng.normal(size=(3000, 3)) @ np.array([[1.0, 0.3, 0.0], [0.0, 1.0, 0.5], [0.0, 0.0, 0.7]])
    names = ["a", "b", "c"]
    for i in range(3):
        write_parquet(tmp_path / f"part-{i}.parquet", X[i * 1000:(i + 1) * 1000], names, row_group_size=250)
    z = zarr.create_array(str(tmp_path / "x.zarr"), shape=X.shape, chunks=(250, 3), dtype="f8")
    z[...] = X
    return X, names, tmp_path


def test_every_input_kind_gives_the_same_theta(same_rows):
    X, names, tmp = same_rows
    ref = GPTiltedDensity(n_features=48, lam=0.1).fit(X)  # a fixed λ: the held-out split's keys depend on the input kind
    f = ref.features_
    inputs = {
        "dask array": da.from_array(X, chunks=(250, 3)),
        "dask dataframe": dd.from_pandas(pd.DataFrame(X, columns=names), npartitions=5),
        "pandas": pd.DataFrame(X, columns=names),
        "parquet glob": str(tmp / "part-*.parquet"),
        "parquet directory": str(tmp),
        "zarr": str(tmp / "x.zarr"),
    }
    for kind, data in inputs.items():
        est = GPTiltedDensity(n_features=48, lam=0.1).fit(data, features=f, **({"columns": names} if kind == "parquet directory" else {}))
        np.testing.assert_allclose(est.theta_, ref.theta_, rtol=1e-9, atol=1e-9 * np.abs(ref.theta_).max(), err_msg=kind)
        assert est.n_samples_seen_ == 3000


def test_parquet_directory_ignores_other_files(same_rows):
    X, names, tmp = same_rows
    est = GPTiltedDensity(n_features=16).fit(str(tmp), columns=names)  # x.zarr is a directory of non-Parquet files
    assert est.n_samples_seen_ == 3000


def test_default_pilot_is_seeded_and_reproducible(same_rows):
    X, names, tmp = same_rows
    a = GPTiltedDensity(n_features=32, random_state=3).fit(str(tmp / "part-*.parquet"))
    b = GPTiltedDensity(n_features=32, random_state=3).fit(str(tmp / "part-*.parquet"))
    assert a.features_ == b.features_
    np.testing.assert_array_equal(a.theta_, b.theta_)
    assert list(a.feature_names_in_) == names


def test_local_cluster_and_threads_agree_bit_for_bit(same_rows):
    from distributed import Client, LocalCluster

    X, _, _ = same_rows
    x = da.from_array(X, chunks=(200, 3))
    with dask.config.set(scheduler="threads"):
        threaded = GPTiltedDensity(n_features=32).fit(x)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster):
        clustered = GPTiltedDensity(n_features=32).fit(x)
    for name in ("gram", "u", "U", "psi"):
        np.testing.assert_array_equal(getattr(clustered.stats_, name), getattr(threaded.stats_, name))
    np.testing.assert_array_equal(clustered.theta_, threaded.theta_)


def test_offset_data_give_the_same_model_as_centred_data(rng):
    """Mean 10⁶, unit spread: the x₀ shift keeps θ equal to the centred fit (docs/mathematics.md, "Features and the
    pilot pass")."""
    Xc = rng.normal(size=(2000, 2)) * [1.0, 0.5]
    offset = np.array([1e6, -2e6])
    ref = GPTiltedDensity(n_features=48).fit(Xc)
    f = ref.features_
    # the same functions of x − offset: c' = c − Z·offset/γ, shift moved by the offset
    moved = RandomFourierFeatures(f.Z, np.mod(f.c - f.Z @ offset / f.gamma, 2 * np.pi), f.gamma, shift=f.shift + offset)
    est = GPTiltedDensity(n_features=48).fit(Xc + offset, features=moved)
    np.testing.assert_allclose(est.theta_, ref.theta_, rtol=1e-6, atol=1e-6 * np.abs(ref.theta_).max())
    np.testing.assert_allclose(est.log_density(Xc[:5] + offset), ref.log_density(Xc[:5]), rtol=1e-6)


def test_dask_input_gives_lazy_outputs(gaussian_mix):
    est = GPTiltedDensity(n_features=32).fit(gaussian_mix)
    x = da.from_array(gaussian_mix, chunks=(100, 2))
    lazy, glazy = est.log_density(x), est.grad_log_density(x)
    assert isinstance(lazy, da.Array) and isinstance(glazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), est.log_density(gaussian_mix), rtol=1e-12)
    np.testing.assert_allclose(glazy.compute(), est.grad_log_density(gaussian_mix), rtol=1e-12)


@pytest.mark.filterwarnings("ignore::tgpflow.errors.DiagnosticWarning")  # λ = 0.1 on 600 rows spills: not checked here
def test_accumulate_fit_from_stats_and_partial_fit(gaussian_mix):
    full = GPTiltedDensity(n_features=32, lam=0.1).fit(gaussian_mix)
    est = GPTiltedDensity(n_features=32, lam=0.1)
    est.fit(gaussian_mix[:250], features=full.features_)
    est.partial_fit(gaussian_mix[250:])
    np.testing.assert_allclose(est.theta_, full.theta_, rtol=1e-10, atol=1e-10)
    assert est.n_samples_seen_ == len(gaussian_mix)
    other = GPTiltedDensity(n_features=32, lam=0.1)
    stats = other.accumulate(gaussian_mix[:300], features=full.features_) + other.accumulate(gaussian_mix[300:])
    other.fit_from_stats(stats)
    np.testing.assert_allclose(other.theta_, full.theta_, rtol=1e-10, atol=1e-10)


def _fit_mixture_base_once(monkeypatch) -> dict:
    """Each mixture base fitted once per test: a later fit of the same pilot rows, seed and cells (another method
    on the same table) gets a copy of the first's result, which is what the search would return again (seeded, and
    tested so: tests/test_mixture_base.py). Returns the cache (key: rows, seed, cells; value: the base, its curve)."""
    import copy
    import hashlib

    from tgpflow.models import tgp_pilot

    real, fitted = tgp_pilot.fit_mixture_base, {}

    def once(rows, random_state=0, *args, cells=None, progress=None, **kwargs):
        seed = ((random_state.entropy, random_state.spawn_key, random_state.pool_size)
                if isinstance(random_state, np.random.SeedSequence) else random_state)
        if not isinstance(seed, (int, tuple)):  # a generator's state moves: not a key
            return real(rows, random_state, *args, cells=cells, progress=progress, **kwargs)
        rows_c = np.ascontiguousarray(rows)
        key = (hashlib.sha256(rows_c.tobytes()).hexdigest(), rows_c.shape, rows_c.dtype.str, seed,
               tuple(sorted((cells or {}).items())), args, tuple(sorted(kwargs.items())))
        if key not in fitted:
            fitted[key] = real(rows, random_state, *args, cells=cells, progress=progress, **kwargs)
        return copy.deepcopy(fitted[key])

    monkeypatch.setattr(tgp_pilot, "fit_mixture_base", once)
    return fitted


def test_magic_gamma_fit_and_sample(magic_frame, monkeypatch):
    """Standardised MAGIC (the paper's kernel Σ_z = dΣ/trΣ is not scale-invariant) with the columns the pilot
    finds bounded at 0 declared so (and the known upper bounds): no diagnostic warning, samples that match the data's
    moments, and (FD; the bounds act the same way on every method, and each MAGIC fit costs about a minute on two
    cores) a fraction of the unbounded model's mass outside the data's box.

    FD and FVPD in one test: their pilots are the same rows, so the mixture base (most of a fit's time) is searched
    once and FVPD's fit takes a copy of it (:func:`_fit_mixture_base_once`)."""
    from tgpflow.features.edges import suggest_bounds

    raw, names = magic_frame.to_numpy(), list(magic_frame.columns)
    suggested = suggest_bounds(raw, names, None)
    assert set(suggested) == {"fLength", "fWidth", "fConc", "fConc1", "fAlpha"}  # never negative, skewed to 0
    mean, sd = raw.mean(0), raw.std(0)
    X = (raw - mean) / sd
    upper = {"fConc": 1.0, "fConc1": 1.0, "fAlpha": 90.0}  # what the data cannot reveal: ratios ≤ 1, angles ≤ 90°
    bounds = [((0 - mean[j]) / sd[j], (upper[c] - mean[j]) / sd[j] if c in upper else None) if c in suggested
              else (None, None) for j, c in enumerate(names)]
    _fit_mixture_base_once(monkeypatch)
    for method in ("fd", "fvpd"):
        _magic_fit_and_sample(X, bounds, method)


def _magic_fit_and_sample(X: np.ndarray, bounds: list, method: str) -> None:
    import warnings as _warnings

    est = GPTiltedDensity(method=method, n_features=128, bounds=bounds, on_bad_rows="drop").fit(X)
    assert est.fit_diagnostics_["warnings"] == [], method
    if method == "fd":
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore", DiagnosticWarning)  # the unbounded fit rightly warns (tested here)
            # S and the pilot (which the mixture search fits on) cut: a quarter of the cost, and 12.1 % of the mass
            # outside against 11.0 % on all 19 020 rows at S = 64 (measured)
            free = GPTiltedDensity(method=method, n_features=64, bounds=None, pilot_rows=5000).fit(X)
        assert free.fit_diagnostics_["warnings"]
        assert est.normalizer_.mass_outside < free.normalizer_.mass_outside / 3  # measured 2.0 % against 12.1 %
    inside = est.bounds_.inside(X)  # rows on a bound (fWidth = 0, fAlpha = 0) have density 0
    assert inside.sum() == est.n_samples_seen_ and np.all(np.isfinite(est.log_density(X[inside]))), method
    samples = est.sample(4000, random_state=1)
    assert samples.shape == (4000, 10)
    assert np.all(np.abs(samples.mean(0) - X.mean(0)) < 0.15), (method, samples.mean(0) - X.mean(0))
    # Pearson correlations of heavy-tailed pairs are the least stable figure. Since the normaliser's proposal
    # is defensive (tgpflow.core.proposal) the selection rejects the small λ whose mass lay far out, and the
    # smoother bounded FD fit at S = 128 has fLength–fWidth 0.57 against the data's 0.77 (a known weakness,
    # in the session note); 0.25 bounds every pair
    corr_s, corr_d = np.corrcoef(samples.T), np.corrcoef(X.T)
    assert np.abs(corr_s - corr_d).max() < 0.25, (method, np.abs(corr_s - corr_d).max())
    ratio = samples.std(0)
    assert np.all((ratio > 0.75) & (ratio < 1.25)), (method, ratio)


def test_save_load_round_trip(tmp_path, gaussian_mix):
    for method in ("fd", "fvpd"):
        est = GPTiltedDensity(method=method, n_features=32).fit(gaussian_mix)
        path = est.save(tmp_path / f"{method}.zarr")
        back = tgpflow.load(path)
        assert back.get_params() == est.get_params()
        np.testing.assert_array_equal(back.log_density(gaussian_mix), est.log_density(gaussian_mix))
        np.testing.assert_array_equal(back.sample(50, random_state=2), est.sample(50, random_state=2))


def test_save_replaces_atomically_and_keeps_the_old_model_on_failure(tmp_path, gaussian_mix, monkeypatch):
    path = tmp_path / "m.zarr"
    good = GPTiltedDensity(n_features=16).fit(gaussian_mix)
    good.save(path)
    other = GPTiltedDensity(n_features=16, random_state=9).fit(gaussian_mix)
    import zarr.core.group as zg

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(zg.Group, "create_array", broken)
    with pytest.raises(OSError, match="disk full"):
        other.save(path)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.zarr"]  # no temporary left
    np.testing.assert_array_equal(tgpflow.load(path).theta_, good.theta_)


def test_tampered_model_is_refused(tmp_path, gaussian_mix):
    path = GPTiltedDensity(n_features=16).fit(gaussian_mix).save(tmp_path / "m.zarr")
    g = zarr.open_group(str(path), mode="r+")
    g["fitted.theta_"][0] = 123.0
    with pytest.raises(ModelFileError, match="checksum mismatch in array 'fitted.theta_'"):
        tgpflow.load(path)


def test_a_pickle_is_never_loaded(tmp_path, gaussian_mix, monkeypatch):
    est = GPTiltedDensity(n_features=16).fit(gaussian_mix)
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps(est))
    calls = []
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: calls.append(a))
    with pytest.raises(ModelFileError, match="not a tgpflow artifact"):
        tgpflow.load(path)
    npz = tmp_path / "evil.npz"
    np.savez(npz, x=np.array([est], dtype=object))  # an object array needs pickle to read
    with pytest.raises(ModelFileError):
        tgpflow.load(npz)
    assert calls == []


# scikit-learn's checks fit a few rows of noise: the fit diagnostics rightly warn there (not what these check);
# they check the API, not the normaliser's precision: 4096 draws, not 2¹⁷ (the selection's 8 γ × 3 folds draw a quarter
# each)
@pytest.mark.filterwarnings("ignore::tgpflow.models.diagnostics.DiagnosticWarning")
@parametrize_with_checks([GPTiltedDensity(n_features=16, normalizer_draws=4096),
                          GPTiltedDensity(method="fvpd", n_features=16, normalizer_draws=4096)])
def test_sklearn_compatible(estimator, check):
    check(estimator)
