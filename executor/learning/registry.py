"""Registries of the learner's implementations by the names a scenario gives them (losses, corrections).

The scenario's ``AlgorithmSpec`` Literal is the one list of names (the scenarios cannot import torch); each
implementation is defined once, in the executor, and registered once under one of those names::

    AlgorithmSpec.loss: Literal["grpo", …]  ──names──►  Registry("algorithm.loss")
    @LOSSES.register("grpo") def grpo_loss(…)  ──────►  LOSSES["grpo"] is grpo_loss

``require_complete`` (called by the module that registers the last entry) refuses a registry that misses a name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar, get_args

from ...scenarios.spec.scenario import AlgorithmSpec

__all__ = ["Registry", "scenario_names"]

T = TypeVar("T")


def scenario_names(field: str) -> tuple[str, ...]:
    """The names ``AlgorithmSpec.<field>`` accepts, in the order of its Literal."""
    return tuple(get_args(AlgorithmSpec.model_fields[field].annotation))


class Registry(Mapping[str, T]):
    """Implementations by name; only the names the scenario allows, each registered once."""

    def __init__(self, setting: str, names: tuple[str, ...]) -> None:
        self.setting = setting  # the scenario key whose values name the entries, e.g. "algorithm.loss"
        self.names = names
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: record the decorated implementation under ``name``."""

        def add(implementation: T) -> T:
            if name not in self.names:
                raise ValueError(f"{self.setting}: {name!r} is not a name the scenario accepts {self.names}")
            if name in self._entries:
                raise ValueError(f"{self.setting}: {name!r} is registered twice")
            self._entries[name] = implementation
            return implementation

        return add

    def missing(self) -> tuple[str, ...]:
        """The scenario's names that nothing is registered under."""
        return tuple(name for name in self.names if name not in self._entries)

    def require_complete(self) -> None:
        if self.missing():
            raise RuntimeError(f"{self.setting}: no implementation registered for {self.missing()}")

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"{self.setting}: unknown {name!r}; use one of {tuple(self._entries)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
