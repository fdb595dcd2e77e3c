"""The estimators' parameters as declarative tables, validated by pydantic (issue 16).

A table is a pydantic model with one field per parameter of an estimator's ``__init__``: its type
(the allowed values and ranges), its default, a one-line help (the field's ``description``) and,
for :class:`GPTiltedParams`, the methods it applies to (``applies``: a capability of
:class:`~tgpflow.models.tgp_method.TGPMethod` that a method must have for the parameter to do
anything, e.g. ``"noise_conditional"``). Rules across parameters are the tables' model validators, or their
:meth:`ParamTable.fit_rules` where the table must still accept each value of one parameter alone (the fit and the CLI
check both).

The estimators check their ``get_params()`` against their table once per public entry
(:mod:`tgpflow.models.estimator_base`); ``tgpflow fit`` makes its model options from these tables
and parses their values with these types (:meth:`ParamTable.parse_text`), and
:mod:`tgpflow.models.registry` reads ``applies`` to say which models use a parameter.

Errors name the parameter, the value and what is allowed, in one sentence read off the type
(``n_features must be a positive integer; got 0``): each type says how it reads with
:class:`Allowed`. Values are checked as given (``strict``: ``"5"`` is not an integer), after NumPy
scalars, arrays and tuples are read as the Python numbers and lists they hold.
"""

from __future__ import annotations

import textwrap
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, model_validator

# Only light modules here: ``tgpflow fit --help`` builds its options from these tables.
from tgpflow.core.choices import (DEFAULT_NORMALIZER_DRAWS, DEFAULT_PILOT_ROWS, DEFAULT_RANK_TOL, KERNELS, PRECISIONS,
                                  REGULARIZERS, WHITEN_MODES)
from tgpflow.core.memory import DEFAULT_BLOCK_BYTES
from tgpflow.models.param_types import (Allowed, Bounds, CliText, Device, Discrete, Fraction, HalfStep, NonNegativeInt,
                                        NonNegativeNumber, OnBadRows, PositiveGrid, PositiveInt, PositiveNumber, Seed,
                                        TGPMethodName, at_least, bare, describe, not_allowed, param, parse_bounds,
                                        parse_discrete, parse_list, plain, type_metadata, union_members)
from tgpflow.models.registry import RSR_METHODS

__all__ = ["ParamTable", "GPTiltedParams", "ScoreParams", "NystromKEFParams", "RootSobolevParams", "FullKEFParams",
           "ExactKDEParams", "Allowed", "CliText", "CRITERIA", "parse_bounds", "parse_discrete", "plain", "describe"]

#: Held-out selection criteria of the GP-tilted density (see its ``criterion``).
CRITERIA = ("loglik", "sliced", "hyvarinen")


#: Parameters that say where a model computes, not what: no statistics, draw or solution depends on them
#: (:meth:`ParamTable.statistics_params`; docs/gpu.md).
WHERE_ONLY = frozenset({"device"})


class ParamTable(BaseModel):
    """The parameter table of one estimator (see the module docstring): subclass it, one field per parameter."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    #: The estimator's name, for messages.
    estimator: ClassVar[str] = "estimator"
    #: Parameters of earlier releases → what replaced them (one sentence, for the error that refuses them).
    renamed: ClassVar[dict[str, str]] = {}
    #: Parameters of earlier releases → the parameter that holds their value now (how a record written then —
    #: a model file, a pipeline store's manifest — reads today).
    legacy_names: ClassVar[dict[str, str]] = {}
    #: Parameters that change only the solve from the statistics — not the statistics, the draw or the basis:
    #: a pipeline store keeps its statistics when only these change (:meth:`statistics_params`).
    solve_only: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _plain_values(cls, data: Any) -> Any:
        return {k: plain(v) for k, v in data.items()} if isinstance(data, Mapping) else data

    @classmethod
    def current_names(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` (of a file or store written by an earlier release) with legacy names read as today's
        (:attr:`legacy_names`)."""
        return {cls.legacy_names.get(k, k): v for k, v in params.items()}

    @classmethod
    def statistics_params(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` as the statistics see them: legacy names read as today's (:meth:`current_names`), the
        solve-only parameters (:attr:`solve_only`) left out. Two sets of params with equal statistics params
        give equal statistics from the same rows and draw."""
        return {k: v for k, v in cls.current_names(params).items() if k not in cls.solve_only | WHERE_ONLY}

    def fit_rules(self) -> None:
        """Rules across parameters that a fit (:meth:`~tgpflow.models.estimator_base.Estimator.check_params`) and the
        CLI's options check and :meth:`check` does not, so that the table still accepts each valid value alone; none
        by default."""

    @classmethod
    def check(cls, params: Mapping[str, Any]) -> ParamTable:
        """The validated table of ``params`` (missing ones take their defaults), or a ValueError with one
        sentence per invalid parameter naming it, its value and what is allowed."""
        try:
            return cls.model_validate(dict(params))
        except ValidationError as exc:
            raise ValueError(cls.explain(exc, params)) from None

    @classmethod
    def explain(cls, exc: ValidationError, params: Mapping[str, Any]) -> str:
        """The sentences of a ValidationError of this table (see :meth:`check`)."""
        by_name: dict[Any, list[Any]] = {}
        for err in exc.errors():
            by_name.setdefault(err["loc"][0] if err["loc"] else None, []).append(err)
        out = []
        for name, errs in by_name.items():
            own = [str(e["ctx"]["error"]) for e in errs if e["type"] == "value_error" and "error" in e.get("ctx", {})]
            if own:  # a validator of the table (a rule across parameters, the method registry) said it
                out.append(own[0])
            elif errs[0]["type"] == "extra_forbidden" and name in cls.renamed:
                out.append(f"{name!r} is no longer a parameter of {cls.estimator}: {cls.renamed[name]}")
            elif errs[0]["type"] == "extra_forbidden":
                out.append(f"{name!r} is not a parameter of {cls.estimator}; its parameters are "
                           f"{', '.join(cls.model_fields)}")
            else:
                finite = any(e["type"] == "finite_number" for e in errs)
                out.append(f"{name} must be {cls.allowed(name)}; got {params.get(name)!r}"
                           + (", which is not finite" if finite else ""))
        return "; ".join(out)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(cls.model_fields)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every parameter's default."""
        return {name: field.default for name, field in cls.model_fields.items()}

    @classmethod
    def type_of(cls, name: str) -> Any:
        """The declared type of parameter ``name`` (with its Annotated metadata)."""
        return typing.get_type_hints(cls, include_extras=True)[name]

    @classmethod
    def allowed(cls, name: str) -> str:
        """What parameter ``name`` accepts, in words."""
        if name == "method" and cls.type_of(name) is TGPMethodName:
            from tgpflow.models.tgp_methods import method_names

            return describe(Literal[method_names()])
        return describe(cls.type_of(name))

    @classmethod
    def help_of(cls, name: str) -> str:
        return cls.model_fields[name].description or ""

    @classmethod
    def numpydoc(cls) -> str:
        """The ``Parameters`` section of the estimator's docstring, read off the table: each parameter, what it
        accepts, its default and its help (the estimator appends it to its own docstring)."""
        out = ["Parameters", "----------"]
        shared = StreamingParams.model_fields if issubclass(cls, StreamingParams) else {}
        for name, field in sorted(cls.model_fields.items(), key=lambda item: item[0] in shared):  # its own first
            out.append(f"{name} : {cls.allowed(name)}; default {field.default!r}")
            out += textwrap.wrap(cls.help_of(name), 100, initial_indent="    ", subsequent_indent="    ")
        return "\n".join(out)

    @classmethod
    def applies_to(cls, name: str, method: Any) -> bool:
        """Whether parameter ``name`` does anything for ``method`` (a TGPMethod): it needs no capability, or
        the method has the one it names."""
        extra = cls.model_fields[name].json_schema_extra
        capability = extra.get("applies") if isinstance(extra, dict) else None
        return capability is None or bool(getattr(method, str(capability)))

    @classmethod
    def metavar(cls, name: str) -> str:
        said = [m for m in type_metadata(cls.type_of(name)) if isinstance(m, CliText)]
        return said[0].metavar if said else "VALUE"

    @classmethod
    def parse_text(cls, name: str, text: str) -> Any:
        """The value of parameter ``name`` written as ``text`` on the command line: a value of one of its
        types, a comma list where it takes a list, ``none`` for None. ValueError says what is allowed."""
        tp = cls.type_of(name)
        said = [m for m in type_metadata(tp) if isinstance(m, CliText)]
        if said:
            return said[0].parse(text)
        members = union_members(tp)
        if type(None) in members and text.strip().lower() in ("none", "null"):
            return None
        lists = [m for m in members if typing.get_origin(bare(m)) is list]
        scalars = [m for m in members if m not in lists and m is not type(None)]
        errors: list[Any] = []
        if scalars and not ("," in text and lists):
            try:
                return TypeAdapter(Union[tuple(scalars)]).validate_strings(text.strip())  # type: ignore[arg-type]
            except ValidationError as exc:
                errors = exc.errors()
        if not lists:
            raise ValueError(not_allowed(text, describe(tp), errors))
        try:
            return parse_list(lists[0], text)
        except ValueError:
            if errors:  # one value that is none of the alternatives: say what the parameter takes
                raise ValueError(not_allowed(text, describe(tp), errors)) from None
            raise


# -- the tables ------------------------------------------------------------------------------------
class StreamingParams(ParamTable):
    """What every estimator that streams a source takes."""

    pilot_rows: at_least(2) = param(DEFAULT_PILOT_ROWS, "Rows in the pilot sample.")  # type: ignore[valid-type]
    on_bad_rows: OnBadRows = param("raise", "Rows with missing or non-finite values: refuse them, or drop them "
                                            "and report how many.")
    block_bytes: PositiveInt = param(DEFAULT_BLOCK_BYTES, "Cap on the per-row part of a chunk task's memory "
                                                         "(bytes); each pass is planned within the workers' limits.")
    random_state: Seed = param(0, "Seed of the pilot, the feature draw and the solve's own draws.")
    device: Device = param("auto", "Where to compute: 'gpu' runs the pass and evaluation of a GP-tilted density or a "
                                   "Nyström kernel model (without n_components) on a CUDA GPU through CuPy (the gpu "
                                   "extra; other models refuse it); 'auto' is the GPU when CuPy sees one and the "
                                   "model runs there, else the CPU.")
    scale: bool = param(False, "Standardize each column by the pilot's mean and standard deviation inside the model "
                               "(stored with it: rows in and out stay in the data's units). For columns of mixed "
                               "scales.")


class GPTiltedParams(StreamingParams):
    """:class:`~tgpflow.models.gp_tilted.GPTiltedDensity` ([Paisley et al.]; docs/mathematics.md, "Fisher divergence and
    base-measure learning", "Noise-conditional Fisher divergence", "The Fisher variational predictive distribution" and
    "MAP, baselines and sampling")."""

    estimator: ClassVar[str] = "GPTiltedDensity"

    method: TGPMethodName = param("fd", "The GP-tilted method (tgpflow.models.tgp_methods).")
    n_features: PositiveInt = param(1000, "S: random Fourier features.")
    lam: Union[PositiveNumber, Literal["auto"]] = param(
        "auto", "Ridge λ on θ (the objective is a sum over rows); 'auto' selects it from lam_grid on held-out rows.",
        applies="selects")
    bandwidth: Union[Literal["auto", "scott"], PositiveNumber, PositiveGrid] = param(
        "auto", "γ: 'auto' (cross-validated on the pilot), 'scott' (the paper's rule), a number, or a list "
                "selected on held-out rows.")
    noise_levels: PositiveInt = param(10, "NCFD: H noise levels σ_h = (h−1)σ_max/H.", applies="noise_conditional")
    sigma_max: Union[Literal["auto", "paper"], NonNegativeNumber] = param(
        "auto", "NCFD: the largest noise level; 'auto' is γ/4, 'paper' √(tr Σ)/d.", applies="noise_conditional")
    eta: Union[Literal["auto"], PositiveNumber, PositiveGrid] = param(
        "auto", "FVPD temperature η; 'auto' is 1/γ², a list is selected on held-out rows.", applies="uses_eta")
    base: Literal["auto", "empirical", "learn", "mixture"] = param(
        "auto", "The base: 'auto' is 'mixture' for a method that takes one when lam='auto', else 'empirical'; "
                "N(μ, Σ) of the exact data moments, that Gaussian learnt from the statistics (eqs 12–16), or a "
                "Gaussian mixture fitted on the pilot (K by held-out log-likelihood).")
    lam_grid: Union[None, PositiveGrid] = param(
        None, "The λ values of lam='auto' (default: 10⁻³ … 10⁴; 10⁻⁴ … 10² for 'hyvarinen').", applies="selects")
    criterion: Literal[CRITERIA] = param(  # type: ignore[valid-type]
        "sliced", "What a held-out selection optimises: sliced KS, normalised log-likelihood, or Hyvärinen loss.",
        applies="selects")
    normalizer_draws: at_least(1000) = param(  # type: ignore[valid-type]
        DEFAULT_NORMALIZER_DRAWS, "Proposal draws of the normaliser estimated after every fit.", applies="integrable")
    validation_fraction: Fraction = param(0.1, "Share of rows held out when selecting (by a hash of their position).",
                                          applies="selects")
    map_draws: PositiveInt = param(100_000, "MAP: S₂ proposal draws of the expectation.", applies="solve_draws")
    map_max_iter: PositiveInt = param(100, "MAP: Newton iterations at most.", applies="solve_draws")
    map_points: Literal["proposal", "base"] = param(
        "proposal", "MAP: its expectation on draws of the defensive proposal weighted by N/q, or on plain base "
                    "draws (Paisley et al., Algorithm 1, for reproduction).", applies="solve_draws")
    kernel_cov: Literal["paper", "identity"] = param("paper", "Σ_z = dΣ/tr Σ (Paisley et al., §IV) or the identity.")
    bounds: Bounds = param("auto", "Hard column bounds, fitted after a log/logit transform; 'auto': those the pilot "
                                   "shows (non-negative columns, shares, rows piled against an edge), just beyond "
                                   "its extreme values, where a mixture fitted without them leaks past the edge or "
                                   "their transform scores better on held-out pilot rows; None: none.")
    discrete: Discrete = param(
        "auto", "Columns modelled as discrete (dequantized over their lattice's cells; samples rounded): 'auto' the "
                "binary columns and coarse lattices of the pilot, None none, or a list.")
    pilot: Literal["sample", "exact"] = param("sample", "A bounded pilot sample, or a full moments pass first.")
    split_every: at_least(2) = param(8, "Fan-in of the reduction tree.")  # type: ignore[valid-type]
    precision: Literal[PRECISIONS] = param(  # type: ignore[valid-type]
        "float64", "'mixed': float32 S×S products accumulated in float64.")
    threshold_quantile: Fraction = param(0.01, "Share of (pilot) training rows flagged by is_anomaly.")

    @model_validator(mode="after")
    def _method_rules(self) -> GPTiltedParams:
        from tgpflow.models.tgp_methods import get_method, method_names

        method = get_method(self.method)
        if self.base == "learn" and not method.learns_base:
            learners = [m for m in method_names() if get_method(m).learns_base]
            raise ValueError(f"base='learn' is defined for method {' and '.join(map(repr, learners))} (eqs 12–16); "
                             f"got {self.method!r}")
        if self.base == "mixture" and not method.mixture_base:
            takers = [m for m in method_names() if get_method(m).mixture_base]
            raise ValueError(f"base='mixture' is defined for method {', '.join(map(repr, takers))}; got "
                             f"{self.method!r} (use base='empirical')")
        if not method.selects and (isinstance(self.bandwidth, list) or isinstance(self.eta, list)):
            raise ValueError(f"{self.method} has no λ or η to select; give the bandwidth as a number, 'scott' or "
                             f"'auto'")
        return self


STEP_HELP = ("The iterations' step: Landweber's η, the ν-method's 1/ρ. None: 1/(1.05‖T‖), so that t steps are t "
             "steps on any data; for the ν-method 1.0 is kscore's NuEstimator (ρ = 1, λ in the kernel's units). "
             "At most 1/‖T‖.")


def step_rule(step: float | None, regularizer: str) -> None:
    """A given ``step`` needs an iteration (a :meth:`ParamTable.fit_rules` rule)."""
    if step is not None and regularizer not in ("landweber", "nu"):
        raise ValueError(f"step is the step of the Landweber and ν-method iterations; regularizer is {regularizer!r} "
                         f"(leave step=None)")


class _KernelParams(StreamingParams):
    """What the Nyström kernel models share ([Zhou et al.], [Sutherland et al.]; docs/mathematics.md, "Nyström kernel exponential family"
    and "Score estimators on a Nyström basis")."""

    renamed: ClassVar[dict[str, str]] = {
        "eps": "it was split into ridge (the direct solve's ridge, now 0 by default; eps's default was 1e-5) and "
               "rank_tol (the eigenvalue cut of G)"}
    legacy_names: ClassVar[dict[str, str]] = {"eps": "ridge"}  # eps was the direct solve's ridge
    solve_only: ClassVar[frozenset[str]] = frozenset({"ridge", "rank_tol", "step"})  # only _solve reads them

    regularizer: Literal[REGULARIZERS] = param(  # type: ignore[valid-type]
        "tikhonov", "The spectral filter g_λ.")
    n_basis: PositiveInt = param(100, "m: basis points drawn from the pilot sample.")
    bandwidth: Union[Literal["median"], PositiveNumber, PositiveGrid] = param(
        "median", "σ_k: the median heuristic, a number, or a list selected on held-out rows.")
    lam: Union[PositiveNumber, Literal["auto"]] = param(
        1e-3, "λ of the filter (Landweber: ⌊1/λ⌋ steps, ν-method: ⌊λ^-1/2⌋, each of step `step`); 'auto' "
              "selects it from lam_grid by the held-out Hyvärinen loss.")
    base: Literal["flat", "gaussian"] = param("flat", "q0: uniform, or N(μ0, Σ0) with the exact moments of the pass.")
    radial: Literal[KERNELS] = param("gaussian", "The scalar kernel.")  # type: ignore[valid-type]
    nu: PositiveNumber = param(1.0, "ν of the ν-method.")
    step: Union[None, PositiveNumber] = param(None, STEP_HELP)
    ridge: NonNegativeNumber = param(
        0.0, "Extra ridge ε of the direct Tikhonov solve, (C/N + λG + εI); 0: none (a rank-deficient G is solved in "
             "the pseudo-inverse limit). Sutherland et al. used 1e-5.")
    rank_tol: Fraction = param(
        DEFAULT_RANK_TOL, "Eigenvalues of G below rank_tol × the largest are cut (the spectral solves and the "
                          "pseudo-inverse fallback).")
    lam_grid: Union[None, PositiveGrid] = param(
        None, "The λ values of lam='auto' (default: 10⁻⁶ … 1, 13 values; Landweber 10⁻⁴ … 1).")
    validation_fraction: Fraction = param(0.1, "Share of rows held out when selecting (by a hash of their position).")
    split_every: at_least(2) = param(8, "Fan-in of the reduction tree.")  # type: ignore[valid-type]

    def fit_rules(self) -> None:
        step_rule(self.step, self.regularizer)


class ScoreParams(_KernelParams):
    """:class:`~tgpflow.models.kernel_score.ScoreEstimator`."""

    estimator: ClassVar[str] = "ScoreEstimator"

    kernel: Literal["curl_free", "diagonal"] = param("curl_free", "The matrix-valued kernel K.")


class NystromKEFParams(_KernelParams):
    """:class:`~tgpflow.models.nystrom_kef.NystromKEF` (the kernel is curl-free)."""

    estimator: ClassVar[str] = "NystromKEF"

    lite: bool = param(False, "The lite model of Sutherland et al.: coefficients on the basis points, its own "
                              "Tikhonov solve.")
    n_components: Union[None, PositiveInt] = param(
        None, "Dimension subsampling: this many of the d components of each basis point.")

    @model_validator(mode="after")
    def _lite_rules(self) -> NystromKEFParams:
        if self.lite and self.regularizer != "tikhonov":
            raise ValueError(f"the lite model is solved with its own Tikhonov regulariser; use "
                             f"regularizer='tikhonov' (got {self.regularizer!r})")
        if self.lite and self.n_components is not None:
            raise ValueError(f"dimension subsampling (n_components={self.n_components}) applies to the derivative "
                             f"basis, not to lite")
        return self


class RootSobolevParams(StreamingParams):
    """:class:`~tgpflow.models.root_sobolev.RootSobolevDensity` ([Kozdoba et al.]; docs/mathematics.md, "Root-Sobolev
    density")."""

    estimator: ClassVar[str] = "RootSobolevDensity"

    method: Literal[RSR_METHODS] = param("rsr", "The root-Sobolev density, or its KDE-SDO baseline.")  # type: ignore[valid-type]
    n_features: PositiveInt = param(2000, "T: SDO random features.")
    smoothness: Union[PositiveNumber, PositiveGrid] = param(
        1.0, "a; a list is selected by the held-out Hyvärinen loss.")
    order: Union[Literal["auto"], PositiveInt] = param("auto", "m_s > d/2; 'auto' is ⌊d/2⌋ + 1.")
    whiten: Literal[WHITEN_MODES] = param(  # type: ignore[valid-type]
        "robust", "The kernel's input: whitened by the bulk of the pilot rows, by all of them, or as given.")
    a_rule: Literal["min", "largest_local_min"] = param("min", "How a is picked from a list.")
    max_iter: PositiveInt = param(200, "Natural-gradient iterations (passes) at most.")
    tol: NonNegativeNumber = param(1e-6, "Stop when a full step lowers the loss by less than this (relative).")
    step: HalfStep = param(0.25, "The step η.")
    persist_bytes: NonNegativeInt = param(2**30, "Keep the rows in memory between iterations up to this size.")
    validation_fraction: Fraction = param(0.2, "Share of rows held out when selecting a.")
    threshold_quantile: Fraction = param(0.01, "Share of (pilot) training rows flagged by is_anomaly.")


class FullKEFParams(ParamTable):
    """:class:`~tgpflow.models.full_kef.FullKEF` (small n, in memory)."""

    estimator: ClassVar[str] = "FullKEF"

    bandwidth: Union[Literal["median"], PositiveNumber] = param("median", "σ_k, or the median heuristic.")
    lam: PositiveNumber = param(1e-3, "λ of the regularised score matching.")
    base: Literal["flat", "gaussian"] = param("flat", "q0: uniform, or the Gaussian of the data's moments.")
    radial: Literal[KERNELS] = param("gaussian", "The scalar kernel.")  # type: ignore[valid-type]
    solver: Literal["auto", "direct", "cg"] = param(
        "auto", "Factor the nd × nd system (16·(nd)² bytes), or conjugate gradients (KEF-CG); 'auto': direct where "
                "it fits in the available RAM, else CG.")
    cg_tol: PositiveNumber = param(1e-10, "Relative tolerance of CG.")
    max_rows: PositiveInt = param(20_000, "Refuse more rows than this (the system is nd × nd).")
    regularizer: Literal["tikhonov", "landweber", "nu"] = param(
        "tikhonov", "The KEF (Tikhonov), or the full-sample Landweber / ν-method iterations by mat-vecs with G.")
    nu: PositiveNumber = param(1.0, "ν of the ν-method.")
    step: Union[None, PositiveNumber] = param(None, STEP_HELP)

    def fit_rules(self) -> None:
        step_rule(self.step, self.regularizer)


class ExactKDEParams(ParamTable):
    """:class:`~tgpflow.models.kde.ExactKDE` (small data)."""

    estimator: ClassVar[str] = "ExactKDE"

    bandwidth: Union[Literal["scott"], PositiveNumber] = param("scott", "γ, or Scott's rule.")
    kernel_cov: Literal["paper", "identity"] = param("paper", "Σ_z = dΣ/tr Σ (Paisley et al., §IV) or the identity.")
    max_rows: at_least(2) = param(20_000, "Rows of the subsample the estimate keeps.")  # type: ignore[valid-type]
    random_state: Seed = param(0, "Seed of the subsample.")
