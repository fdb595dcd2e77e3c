"""The estimators' parameter tables (issue 16): every parameter's invalid values are refused by the public
entries with one sentence naming the parameter, the value and what is allowed; the rules across parameters;
validation once per entry; the tables equal ``__init__``; get_params/set_params/clone round trips.

The cases are made from the tables themselves, so a parameter added to a table is tested here without a
new test."""

from __future__ import annotations

import typing

import numpy as np
import pytest
from annotated_types import Ge, Gt, Lt, MinLen
from sklearn.base import clone

import tgpflow
from tgpflow.models.estimator_base import Estimator
from tgpflow.models.full_kef import FullKEF
from tgpflow.models.kde import ExactKDE
from tgpflow.models.params import ExactKDEParams, GPTiltedParams, plain

ESTIMATORS = [tgpflow.GPTiltedDensity, tgpflow.NystromKEF, tgpflow.ScoreEstimator, tgpflow.RootSobolevDensity,
              FullKEF, ExactKDE]
#: Values no parameter should take whatever its type: text where numbers go, numbers where words go, nested junk.
JUNK = ["nope", "5", -1, 0, True, 1.5, float("nan"), float("inf"), [], [-1.0], {"a": 1}, [[1, 2, 3]]]


def _members(tp) -> list[tuple[object, tuple]]:
    """(type, its Annotated metadata) for each alternative of a parameter's type."""
    if typing.get_origin(tp) is typing.Annotated:
        inner = typing.get_args(tp)[0]
        if typing.get_origin(inner) is typing.Union:
            return _members(inner)
        return [(inner, tp.__metadata__)]
    if typing.get_origin(tp) is typing.Union:
        return [m for a in typing.get_args(tp) for m in _members(a)]
    return [(tp, ())]


def outside(tp) -> list:
    """Just outside each declared bound of a type (Ge(n) → n − 1, Gt(x) → x, Lt(x) → x, an empty list where a
    list needs an item, a list with one item outside its bounds)."""
    out = []
    for base, meta in _members(tp):
        for m in meta:
            out += [m.ge - 1] if isinstance(m, Ge) else [m.gt] if isinstance(m, Gt) else [m.lt] if isinstance(m, Lt) \
                else [[]] if isinstance(m, MinLen) else []
        if typing.get_origin(base) is list:
            out += [[v] for v in outside(typing.get_args(base)[0])]
    return out


def inside(tp) -> list:
    """Just inside each declared bound of a type (Ge(n) → n, Gt(x) → x + a little, Lt(x) → x − a little)."""
    out = []
    for base, meta in _members(tp):
        step = 1 if base is int else 1e-9
        for m in meta:
            out += [m.ge] if isinstance(m, Ge) else [m.gt + step] if isinstance(m, Gt) \
                else [m.lt - step] if isinstance(m, Lt) else []
        if typing.get_origin(base) is list:
            out += [[v] for v in inside(typing.get_args(base)[0])]
    return out


def _rejected(table, name):
    bad = []
    for value in outside(table.type_of(name)) + JUNK:
        try:
            table.check({name: value})
        except ValueError:
            bad.append(value)
    return bad


CASES = [(cls, name) for cls in ESTIMATORS for name in cls.params_table.model_fields]


@pytest.mark.parametrize("cls, name", CASES, ids=[f"{c.__name__}-{n}" for c, n in CASES])
def test_every_invalid_value_is_refused_by_fit_naming_the_parameter_and_value(cls, name):
    table = cls.params_table
    bad = _rejected(table, name)
    assert bad, f"{cls.__name__}.{name} accepts every junk value"  # the check can fail
    for value in bad:
        est = cls().set_params(**{name: value})
        with pytest.raises(ValueError) as err:
            est.fit(np.zeros((4, 2)))  # refused before reading any row
        message = str(err.value)
        assert f"{name} must be" in message and repr(value) in message, message
        if name != "method" or cls is tgpflow.RootSobolevDensity:  # GP methods: the registry lists them
            assert table.allowed(name) in message, message


@pytest.mark.parametrize("cls, name", CASES, ids=[f"{c.__name__}-{n}" for c, n in CASES])
def test_each_bound_is_where_the_table_says(cls, name):
    """Just outside a declared bound is refused and just inside it accepted: the values above are refused for
    their bound, not only for their type."""
    table = cls.params_table
    tp = table.type_of(name)
    for value in outside(tp):
        with pytest.raises(ValueError, match=name):
            table.check({name: value})
    for value in inside(tp):
        assert table.check({name: value}) is not None


def test_rules_across_parameters_name_them():
    X = np.zeros((4, 2))
    with pytest.raises(ValueError, match=r"base='learn' is defined for method 'fd' and 'fvpd'.*got 'ncfd'"):
        tgpflow.GPTiltedDensity(method="ncfd", base="learn").fit(X)
    with pytest.raises(ValueError, match="kde_rff has no λ or η to select"):
        tgpflow.GPTiltedDensity(method="kde_rff", bandwidth=[0.5, 1.0]).fit(X)
    with pytest.raises(ValueError, match=r"regularizer='tikhonov' \(got 'nu'\)"):
        tgpflow.NystromKEF(lite=True, regularizer="nu").fit(X)
    with pytest.raises(ValueError, match=r"n_components=2"):
        tgpflow.NystromKEF(lite=True, n_components=2).fit(X)
    with pytest.raises(ValueError, match=r"method must be one of \(.*'fd'.*\); got 'nope'"):
        tgpflow.GPTiltedDensity(method="nope").fit(X)


def test_all_invalid_parameters_are_named_at_once():
    with pytest.raises(ValueError) as err:
        tgpflow.GPTiltedDensity(n_features=0, lam=-1.0, criterion="best").fit(np.zeros((4, 2)))
    assert [s.split(" must be")[0] for s in str(err.value).split("; ") if " must be" in s] == \
        ["n_features", "lam", "criterion"]


def test_a_renamed_parameter_is_refused_with_what_replaced_it():
    from tgpflow.models.params import NystromKEFParams
    from tgpflow.pipeline.spec import ModelSpec

    with pytest.raises(ValueError, match="'eps' is no longer a parameter of NystromKEF: .*ridge.*rank_tol"):
        NystromKEFParams.check({"eps": 1e-5})
    with pytest.raises(ValueError, match="'eps' is no longer a parameter of ScoreEstimator: .*ridge"):
        ModelSpec(name="k", estimator="ScoreEstimator", params={"eps": 1e-5, "n_basis": 10})


def test_numpy_values_and_tuples_are_read_as_the_numbers_and_lists_they_hold():
    GPTiltedParams.check({"n_features": np.int64(8), "lam": np.float32(0.5), "bandwidth": np.array([0.5, 1.0]),
                          "lam_grid": (0.1, 1.0), "bounds": {"a": (0, None)}})
    with pytest.raises(ValueError, match="n_features must be a positive integer; got 8.0"):
        GPTiltedParams.check({"n_features": 8.0})  # a float is not an integer, even a whole one


@pytest.mark.parametrize("entry", ["fit", "accumulate", "fit_from_stats", "partial_fit"])
def test_parameters_are_checked_once_per_entry(entry, monkeypatch, rng):
    X = rng.normal(size=(300, 2))
    est = tgpflow.GPTiltedDensity(n_features=8, lam=0.5, bandwidth=1.0, normalizer_draws=1000).fit(X)
    calls = []
    real = Estimator.check_params
    monkeypatch.setattr(Estimator, "check_params", lambda self: calls.append(1) or real(self))
    if entry == "fit_from_stats":
        est.fit_from_stats(est.stats_)
    elif entry == "fit":
        est.fit(X)
    else:
        getattr(est, entry)(X[:50])
    assert len(calls) == 1


def test_kernel_and_rsr_fits_check_once(monkeypatch, rng):
    X = rng.normal(size=(200, 2))
    calls = []
    real = Estimator.check_params
    monkeypatch.setattr(Estimator, "check_params", lambda self: calls.append(type(self).__name__) or real(self))
    tgpflow.NystromKEF(n_basis=5).fit(X)
    tgpflow.RootSobolevDensity(n_features=16, max_iter=2).fit(X)
    assert calls == ["NystromKEF", "RootSobolevDensity"]


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_the_table_is_the_signature(cls):
    import inspect

    params = inspect.signature(cls.__init__).parameters
    assert {n: p.default for n, p in params.items() if n != "self"} == cls.params_table.defaults()
    assert all(p.kind is p.KEYWORD_ONLY for n, p in params.items() if n != "self")
    cls.params_table.check(cls().get_params())  # the defaults are valid


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_the_docstring_documents_every_parameter_from_the_table(cls):
    import pydoc

    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    table = cls.params_table
    for name, default in table.defaults().items():
        entry = f"{name} : {table.allowed(name)}; default {default!r}"
        assert entry in text, entry
        assert " ".join(table.help_of(name).split()[:4]) in text, name
    assert text.count("\n |  Parameters\n |  ----------") == 1  # one section, not a hand-written one beside it


def test_a_table_that_drifts_from_init_is_refused_when_the_class_is_made():
    with pytest.raises(TypeError, match=r"ExactKDE2.__init__ and its parameter table ExactKDEParams differ in "
                                        r"\['kernel_cov', 'max_rows'\]"):
        class ExactKDE2(ExactKDE):
            params_table = ExactKDEParams

            def __init__(self, *, bandwidth="scott", max_rows=10, random_state=0):
                super().__init__(bandwidth=bandwidth, max_rows=max_rows, random_state=random_state)


CANDIDATES = ["drop", "cpu", "identity", "exact", "mixed", "loglik", "learn", "gaussian", "diagonal", "nu", "imq",
              "kde_sdo", "classical", "largest_local_min", "cg", "paper", "ncfd", 3, 0.25, [0.5, 2.0], True, None]


def _non_defaults(table) -> dict:
    """A valid value other than the default for each parameter that has one among CANDIDATES, kept only while
    all of them together still satisfy the table's rules (to see them survive a round trip)."""
    out: dict = {}
    for name, default in table.defaults().items():
        for value in CANDIDATES:
            if value == default and type(value) is type(default):
                continue
            try:
                table.check({**out, name: value})
            except ValueError:
                continue
            out[name] = value
            break
    return out


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_get_params_set_params_and_clone_round_trip(cls):
    table = cls.params_table
    values = _non_defaults(table)
    assert len(values) >= len(table.model_fields) // 2  # most parameters really move off their default
    est = cls(**values)
    assert est.get_params() == {**table.defaults(), **values}
    twin = clone(est)
    assert twin is not est and twin.get_params() == est.get_params()
    other = cls().set_params(**values)
    assert other.get_params() == est.get_params()
    est.check_params()


def test_saved_parameters_load_as_given(tmp_path, rng):
    X = rng.normal(size=(400, 2))
    est = tgpflow.GPTiltedDensity(method="fvpd", n_features=8, lam="auto", lam_grid=(0.5, 5.0), eta=np.array([1.0, 2.0]),
                                  bandwidth=1.0, bounds=[(-10.0, None), (-10.0, None)], normalizer_draws=1000,
                                  criterion="hyvarinen").fit(X)
    back = tgpflow.load(est.save(tmp_path / "m.zarr"))
    assert back.get_params() == plain(est.get_params())
    back.check_params()
