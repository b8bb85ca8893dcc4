"""Optuna samplers by name, behind one small plugin interface.

Constraints reach the samplers through ``Trial.set_constraint`` (Optuna 5
reads them from the trial; its ``constraints_func`` arguments are deprecated),
so a sampler only has to say whether it takes them into account.

``random`` is the baseline every other sampler is measured against. ``gp``
needs PyTorch, which is an optional extra (``pip install 'bootstorm[gp]'``):
it is several hundred MB and nothing else needs it.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from typing import ClassVar

import optuna
from optuna.samplers import BaseSampler

from .._params import short_repr
from ..models import ConfigError
from . import _tpe_logpdf, _tpe_ndtr
from ._tpe import TpeSampler

__all__ = ["SAMPLERS", "SamplerPlugin", "make_sampler"]


class SamplerPlugin(ABC):
    """Builds one kind of sampler; says what it supports."""

    name: ClassVar[str]
    multi_objective: ClassVar[bool] = True
    constraints: ClassVar[bool] = True
    needs: ClassVar[tuple[str, ...]] = ()
    """Importable modules the sampler needs, and the extra that installs them."""
    extra: ClassVar[str | None] = None

    @abstractmethod
    def build(self, *, seed: int) -> BaseSampler: ...


class _Random(SamplerPlugin):
    name = "random"

    def build(self, *, seed: int) -> BaseSampler:
        # Random search ignores constraints when it samples; feasibility still
        # decides which trial is best.
        return optuna.samplers.RandomSampler(seed=seed)


class _Tpe(SamplerPlugin):
    name = "tpe"

    def build(self, *, seed: int) -> BaseSampler:
        # Optuna's TPE with its hottest function compiled and finished trials
        # read once (the same proposals, bit for bit).
        _tpe_ndtr.install()
        if _tpe_ndtr.installed():
            _tpe_logpdf.install()  # compiled on top of the compiled log_ndtr
        # multivariate: the stage limits interact (one stage's limit moves the
        # best limit of the next), which independent TPE cannot model.
        return TpeSampler(seed=seed, multivariate=True)


class _Gp(SamplerPlugin):
    name = "gp"
    needs = ("torch",)
    extra = "gp"

    def build(self, *, seed: int) -> BaseSampler:
        # The simulation is deterministic for a fixed seed (common random numbers).
        return optuna.samplers.GPSampler(seed=seed, deterministic_objective=True)


class _CmaEs(SamplerPlugin):
    name = "cmaes"
    multi_objective = False
    constraints = False
    needs = ("cmaes",)

    def build(self, *, seed: int) -> BaseSampler:
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)


class _NsgaII(SamplerPlugin):
    name = "nsga2"

    def build(self, *, seed: int) -> BaseSampler:
        # A small population: searches here run tens to hundreds of trials.
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=20)


SAMPLERS: dict[str, SamplerPlugin] = {
    p.name: p for p in (_Tpe(), _Gp(), _CmaEs(), _NsgaII(), _Random())
}


def make_sampler(
    name: str,
    *,
    seed: int,
    n_objectives: int,
    constrained: bool = False,
) -> BaseSampler:
    """The sampler called ``name``, or a :class:`ConfigError` naming what is wrong."""
    plugin = SAMPLERS.get(name)
    if plugin is None:
        raise ConfigError(
            f"sampler: unknown sampler {short_repr(name)}; known: {', '.join(SAMPLERS)}"
        )
    for module in plugin.needs:
        if importlib.util.find_spec(module) is None:
            how = (
                f"pip install 'bootstorm[{plugin.extra}]'"
                if plugin.extra
                else f"pip install {module}"
            )
            raise ConfigError(f"sampler: {name!r} needs the {module!r} package; {how}")
    if n_objectives > 1 and not plugin.multi_objective:
        raise ConfigError(
            f"sampler: {name!r} optimises one objective, but got {n_objectives}; "
            "use tpe, nsga2, gp or random"
        )
    if constrained and not plugin.constraints:
        raise ConfigError(
            f"sampler: {name!r} does not support constraints (memory budget, p99 SLO); "
            "use tpe, nsga2, gp or random"
        )
    return plugin.build(seed=seed)
