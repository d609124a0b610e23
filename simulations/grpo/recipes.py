"""Named recipes: the settings of a published method as :class:`~simulations.grpo.config.GRPOConfig` overrides.

A recipe fixes the fields that *define* a method (advantage family and its parameters, loss, clip
range, aggregation, regularisers, the update schedule of its paper) and leaves the rest — task,
model, learning rate, batch size, steps, seed, output — to the user; a field the user sets
explicitly wins over the recipe (:func:`config`).  Every recipe names its source.

The F-GRPO recipes (F-GRPO Sec. 2.2, Eq. 15-16, App. H.2, Tables 5-6), all with PPO epochs 1,
token-mean aggregation, no KL term (β = 0, "following DAPO"), AdamW weight decay 0.01 and four
minibatches per step (global batch 256 prompts, mini-batch 64: Table 5), the model-scale settings
(learning rate 1e-6, batch 256, response length, warm-up 15) left out:

========== ===================================================================================
``grpo``     GRPO advantage, PPO loss with ε_low = ε_high = 0.2
``f-grpo``   ``grpo`` with the focal weight, ``fgrpo`` γ = 0.5 (Table 6, Qwen2.5-7B)
``dapo``     asymmetric clip ("clip-higher") ε_low = 0.2, ε_high = 0.28
``f-dapo``   ``dapo`` with ``fgrpo`` γ = 0.5 (Table 6, Qwen2.5-7B)
``cispo``    CISPO loss: clipped importance weight, ε_low^IS = 1.0, ε_high^IS = 5.0 (Eq. 5, App. H.2)
``f-cispo``  ``cispo`` with ``fgrpo`` γ = 1.0 (Table 6, Qwen2.5-7B)
``grpo-h``   ``grpo`` with an entropy bonus 0.001 (Sec. 5.5, App. H.2: the best of {1e-4, 1e-3})
``grpo-kl``  ``grpo`` with a KL penalty 0.001 (Sec. 5.5, App. H.2: the best of {1e-3, 1e-2})
========== ===================================================================================

DAPO as Yu et al. (2025) define it also has dynamic sampling, overlong filtering and a soft
length penalty; F-GRPO describes its DAPO baseline by the clip range only (Sec. 2.2, App. H.2),
so ``dapo``/``f-dapo`` do not switch on ``dynamic_sampling`` — add ``--dynamic-sampling`` for
DAPO's Sec. 3.2.

Examples
--------
>>> from simulations.grpo import recipes
>>> recipes.names()
['grpo', 'f-grpo', 'dapo', 'f-dapo', 'cispo', 'f-cispo', 'grpo-h', 'grpo-kl']
>>> cfg = recipes.config("f-dapo", out="runs/fdapo", steps=100)
>>> cfg.advantage, cfg.params, cfg.eps, cfg.aggregation, cfg.minibatches
('fgrpo', {'gamma': 0.5}, (0.2, 0.28), 'token-mean', 4)
>>> recipes.config("f-cispo", out="runs/x", params={"gamma": 2.0}).params   # the user's value wins
{'gamma': 2.0}
>>> recipes.get("nope")
Traceback (most recent call last):
...
ValueError: recipe: unknown recipe 'nope'; allowed: cispo, dapo, f-cispo, f-dapo, f-grpo, grpo, grpo-h, grpo-kl
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from rlvr_plumbing.registry import Registry

from .config import GRPOConfig

__all__ = ["Recipe", "register", "unregister", "registered", "get", "names", "settings", "config", "apply"]

#: fields a recipe may not set: where the run goes and what it runs on
NOT_RECIPE_FIELDS = ("out", "init", "resume", "overwrite", "device", "threads", "quiet")

_REGISTRY: Registry[Recipe] = Registry("recipe")


@dataclass(frozen=True)
class Recipe:
    """A named set of :class:`GRPOConfig` overrides with its source."""

    name: str
    description: str
    source: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = {f.name for f in dataclasses.fields(GRPOConfig)}
        bad = sorted(set(self.settings) - known)
        if bad:
            raise ValueError(f"recipe {self.name!r}: settings {', '.join(bad)} are not GRPOConfig fields")
        banned = sorted(set(self.settings) & set(NOT_RECIPE_FIELDS))
        if banned:
            raise ValueError(f"recipe {self.name!r}: a recipe may not set {', '.join(banned)}")
        if not self.source:
            raise ValueError(f"recipe {self.name!r}: a recipe needs its source")
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))


def register(recipe: Recipe) -> Recipe:
    """Add ``recipe`` (a second recipe under a taken name raises ``ValueError``)."""
    return _REGISTRY.register(recipe)


def unregister(name: str) -> None:
    _REGISTRY.unregister(name)


def registered(recipe: Recipe) -> AbstractContextManager[Recipe]:
    """Context manager: ``recipe`` is registered inside the ``with`` block only (for tests)."""
    return _REGISTRY.registered(recipe)


def names() -> list[str]:
    """Registered recipe names, in registration order."""
    return _REGISTRY.names()


def get(name: str) -> Recipe:
    """The recipe ``name``; an unknown name is refused with the list of registered ones."""
    return _REGISTRY.get(name)


def settings(name: str) -> dict[str, Any]:
    """Recipe ``name``'s ``GRPOConfig`` overrides, as a new dict (``{**settings(name), **given}``
    lets the fields the user gave win)."""
    return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in get(name).settings.items()}


def config(name: str, **overrides: Any) -> GRPOConfig:
    """``GRPOConfig`` of recipe ``name`` with ``overrides`` (which win over the recipe); ``out`` is required."""
    return GRPOConfig(**{**settings(name), **overrides})


def apply(name: str, cfg: GRPOConfig, given: Iterable[str] = ()) -> GRPOConfig:
    """``cfg`` with recipe ``name``'s settings, except the fields named in ``given`` (those the
    user set explicitly, e.g. on the command line), which keep ``cfg``'s values."""
    keep = set(given)
    return dataclasses.replace(cfg, **{k: v for k, v in settings(name).items() if k not in keep})


# ------------------------------------------------------------------ the recipes
_FGRPO_COMMON = {"ppo_epochs": 1, "minibatches": 4, "aggregation": "token-mean", "kl_coef": 0.0,
                 "entropy_coef": 0.0, "weight_decay": 0.01, "temperature": 1.0, "top_p": 1.0,
                 "max_grad_norm": 1.0, "schedule": None}
_SRC = "F-GRPO App. H.2, Table 5"


def _f(base: dict[str, Any], gamma: float) -> dict[str, Any]:
    return {**base, "advantage": "fgrpo", "params": {"gamma": gamma}}


_GRPO = {**_FGRPO_COMMON, "advantage": "grpo", "params": {}, "loss": "ppo", "eps_low": 0.2, "eps_high": 0.2}
_DAPO = {**_GRPO, "eps_high": 0.28}
_CISPO = {**_GRPO, "loss": "cispo", "eps_low": 1.0, "eps_high": 5.0}

for _r in (
    Recipe("grpo", "GRPO as the F-GRPO experiments run it: PPO clip 0.2/0.2, token-mean, no KL",
           f"Shao et al. 2024; {_SRC}", _GRPO),
    Recipe("f-grpo", "F-GRPO: GRPO with the focal weight (1 - p̂)^γ, γ = 0.5",
           f"F-GRPO Eq. 15-16; {_SRC}, Table 6 (Qwen2.5-7B)", _f(_GRPO, 0.5)),
    Recipe("dapo", "DAPO as F-GRPO runs it: asymmetric clip ε_low 0.2, ε_high 0.28, token-mean, no KL",
           f"Yu et al. 2025; F-GRPO Sec. 2.2; {_SRC}", _DAPO),
    Recipe("f-dapo", "F-DAPO: DAPO with the focal weight, γ = 0.5",
           f"F-GRPO Sec. 4, Eq. 16; {_SRC}, Table 6 (Qwen2.5-7B)", _f(_DAPO, 0.5)),
    Recipe("cispo", "CISPO: clipped importance weights (1.0/5.0) in a REINFORCE-style loss, token-mean",
           f"Chen et al. 2025; F-GRPO Eq. 5; {_SRC}", _CISPO),
    Recipe("f-cispo", "F-CISPO: CISPO with the focal weight, γ = 1.0",
           f"F-GRPO Sec. 4, Eq. 16; {_SRC}, Table 6 (Qwen2.5-7B)", _f(_CISPO, 1.0)),
    Recipe("grpo-h", "GRPO with an entropy bonus of 0.001 (GRPO-H of F-GRPO Sec. 5.5)",
           "F-GRPO Sec. 5.5, App. G Table 4, App. H.2", {**_GRPO, "entropy_coef": 0.001}),
    Recipe("grpo-kl", "GRPO with a KL penalty of 0.001 to the initial policy (GRPO-KL of F-GRPO Sec. 5.5)",
           "F-GRPO Sec. 5.5, App. G Table 4, App. H.2", {**_GRPO, "kl_coef": 0.001}),
):
    register(_r)
del _r
