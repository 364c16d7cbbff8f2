"""Random small CPU scenarios for ``asyncrl validate``: drawn from a seed, valid by construction.

    seed ─► numpy Generator ─► per draw: a schedule cell and a loss dealt from shuffled decks,
                               lengths, sizes and engines drawn freely ─► scenario dict
                               ─► scenarios.spec.loading.validate_scenario (drawn again if it refuses)

The space (the tiny model on ``cpu``, timing mode, one training device, one
device per engine):

    completion lengths   lognormal  median 8–48, σ 0.3–1.3, cap 3–8 × the median (≤ 256)
                         pareto     scale 6–24, α 1.1–2.5, cap 4–12 × the scale (≤ 256)
                         fixed      12–64
    prompt lengths       fixed 8–32
    group size           2–8 samples per prompt;  prompts per step 2–6
    engines              1 or 2 (cluster.generation_devices); two engines and the learner are three
                         busy processes, more than two cores hold: they are oversubscribed, and
                         ``hardware.host_cores`` (validate writes this machine's) lets the
                         simulator share the cores among them (``scenarios.rules.cores``)
    max_concurrency      1–6 whole groups per engine
    schedule cells       sync | pipelined N 1–2 | streaming η 1–3 with in-flight updates |
                         streaming η 1–3 without them, refresh lazy | the same with refresh drain
    losses               grpo | rloo | online_dpo | ppo;  updates_per_step 1–2
    run.seed             0–999,999

The five schedule cells and the four losses are dealt from decks shuffled
anew each time one runs out, so any five draws see every cell and any four
every loss, in an order the seed decides: a handful of scenarios covers all
of them instead of leaving it to chance. Everything else is drawn
independently. The same seed gives the same scenarios, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

import numpy as np
from asyncrl.scenarios.spec.loading import ScenarioError, validate_scenario
from asyncrl.scenarios.spec.scenario import AlgorithmSpec, Scenario
from asyncrl.scenarios.spec.schedules import SCHEDULES

SCHEDULE_CELLS = ("sync", "pipelined", "streaming in-flight", "streaming lazy", "streaming drain")
LOSSES: tuple[str, ...] = get_args(AlgorithmSpec.model_fields["loss"].annotation)  # the scenario's names, in order
LENGTH_KINDS = ("lognormal", "pareto", "fixed")
MAX_CAP = 256
MAX_ATTEMPTS = 100


@dataclass(frozen=True)
class Draw:
    """One drawn scenario: its file's sections, the validated scenario, and its key settings."""

    index: int
    data: dict[str, Any]
    scenario: Scenario
    settings: dict[str, Any]

    @property
    def name(self) -> str:
        return self.scenario.name

    @property
    def label(self) -> str:
        """The key settings in a few words, for tables."""
        s = self.settings
        return f"{s['schedule_label']}, {s['loss']}, {s['engines']} eng, {s['prompts']}x{s['group']}, {s['lengths']}"


def draw_scenarios(count: int, seed: int, steps: int, host_cores: int | None = None) -> list[Draw]:
    """``count`` scenarios of ``steps`` learner steps, the same for the same ``seed``; ``host_cores``, when
    given, is written into each (``hardware.host_cores``: the cores of the machine that will run them)."""
    rng = np.random.default_rng(seed)
    cells, losses = _Deck(SCHEDULE_CELLS, rng), _Deck(LOSSES, rng)
    hardware: dict[str, Any] = {"device": "cpu"} if host_cores is None else {"device": "cpu", "host_cores": host_cores}
    return [_draw_valid(index, rng, cells(), losses(), steps, hardware) for index in range(count)]


class _Deck:
    """Deals the values in a shuffled order, shuffling anew each time all have been dealt."""

    left: list[str]

    def __init__(self, values: tuple[str, ...], rng: np.random.Generator) -> None:
        self.values, self.rng, self.left = values, rng, []

    def __call__(self) -> str:
        if not self.left:
            self.left = [self.values[i] for i in self.rng.permutation(len(self.values))]
        return self.left.pop()


def _draw_valid(
    index: int, rng: np.random.Generator, cell: str, loss: str, steps: int, hardware: dict[str, Any]
) -> Draw:
    """Draw until the scenario loader accepts one (by construction the first), keeping the dealt cell and loss."""
    for _ in range(MAX_ATTEMPTS):
        data, settings = _draw_data(index, rng, cell, loss, steps)
        data["hardware"] = dict(hardware)
        try:
            scenario = validate_scenario(data)
        except ScenarioError:
            continue
        return Draw(index, data, scenario, settings)
    raise ScenarioError(f"validate: no valid scenario in {MAX_ATTEMPTS} draws for {cell}, {loss}")


def _draw_data(
    index: int, rng: np.random.Generator, cell: str, loss: str, steps: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    group, prompts = int(rng.integers(2, 9)), int(rng.integers(2, 7))
    engines = int(rng.integers(1, 3))
    completion, lengths = _completion(rng)
    schedule, schedule_label = _schedule(rng, cell)
    schedule["max_concurrency"] = group * int(rng.integers(1, 7))
    data: dict[str, Any] = {
        "name": f"validate-{index:02d}",
        "model": {"preset": "tiny"},
        "hardware": {"device": "cpu"},
        "cluster": {"generation_devices": engines, "training_devices": 1, "devices_per_engine": 1},
        "workload": {
            "prompts_per_step": prompts,
            "samples_per_prompt": group,
            "prompt_tokens": {"kind": "fixed", "value": int(rng.integers(8, 33))},
            "completion_tokens": completion,
        },
        "schedule": schedule,
        "algorithm": {"loss": loss, "updates_per_step": int(rng.integers(1, 3))},
        "run": {"steps": steps, "seed": int(rng.integers(0, 1_000_000))},
    }
    settings = {
        "schedule": schedule["kind"],
        "bound": {"sync": 0, "pipelined": schedule.get("off_policy_steps"), "streaming": schedule.get("max_staleness")}[
            schedule["kind"]
        ],
        "in_flight_updates": bool(schedule.get("in_flight_updates", False)),
        "refresh": schedule.get("refresh", ""),
        "schedule_label": schedule_label,
        "loss": loss,
        "updates_per_step": data["algorithm"]["updates_per_step"],
        "engines": engines,
        "group": group,
        "prompts": prompts,
        "max_concurrency": schedule["max_concurrency"],
        "prompt_tokens": data["workload"]["prompt_tokens"]["value"],
        "lengths": lengths,
    }
    return data, settings


def _schedule(rng: np.random.Generator, cell: str) -> tuple[dict[str, Any], str]:
    """The schedule section of a cell, and its label: the schedule's own (``pipelined-2``,
    ``streaming-3-inflight``), then the refresh of a streaming cell without in-flight updates
    (``streaming-1 lazy``)."""
    section = _schedule_section(rng, cell)
    label = SCHEDULES[section["kind"]].model_validate(section).label
    refresh = section.get("refresh")
    return section, f"{label} {refresh}" if refresh else label


def _schedule_section(rng: np.random.Generator, cell: str) -> dict[str, Any]:
    if cell == "sync":
        return {"kind": "sync"}
    if cell == "pipelined":
        return {"kind": "pipelined", "off_policy_steps": int(rng.integers(1, 3))}
    streaming: dict[str, Any] = {"kind": "streaming", "max_staleness": int(rng.integers(1, 4))}
    if cell == "streaming in-flight":
        return {**streaming, "in_flight_updates": True}
    return {**streaming, "in_flight_updates": False, "refresh": cell.split()[1]}


def _completion(rng: np.random.Generator) -> tuple[dict[str, Any], str]:
    """A completion-length distribution and its label."""
    kind = LENGTH_KINDS[int(rng.integers(len(LENGTH_KINDS)))]
    return _LENGTHS[kind](rng)


def _lognormal(rng: np.random.Generator) -> tuple[dict[str, Any], str]:
    median, sigma = int(rng.integers(8, 49)), round(float(rng.uniform(0.3, 1.3)), 2)
    cap = min(MAX_CAP, int(median * rng.uniform(3, 8)))
    return {"kind": "lognormal", "median": median, "sigma": sigma, "max_tokens": cap}, (
        f"lognormal {median} σ{sigma:g} ≤{cap}"
    )


def _pareto(rng: np.random.Generator) -> tuple[dict[str, Any], str]:
    scale, alpha = int(rng.integers(6, 25)), round(float(rng.uniform(1.1, 2.5)), 2)
    cap = min(MAX_CAP, int(scale * rng.uniform(4, 12)))
    return {"kind": "pareto", "scale": scale, "alpha": alpha, "max_tokens": cap}, f"pareto {scale} α{alpha:g} ≤{cap}"


def _fixed(rng: np.random.Generator) -> tuple[dict[str, Any], str]:
    value = int(rng.integers(12, 65))
    return {"kind": "fixed", "value": value}, f"fixed {value}"


_LENGTHS: dict[str, Callable[[np.random.Generator], tuple[dict[str, Any], str]]] = {
    "lognormal": _lognormal,
    "pareto": _pareto,
    "fixed": _fixed,
}
