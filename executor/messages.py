"""What the coordinator and the actor processes say to each other, as typed messages.

    coordinator ──commands[i]──► actor i                actor i ──results──► coordinator
    Go(t0)                start the run clock           Ready(actor)
    StartGroup(group, requests)  generate these         RolloutDone(actor, group, rollout)   one per sample
    LoadWeights(version)  receive weights, load them    Loaded(actor, version, start, end)
    Stop()                leave the loop                ActorFailed(actor, traceback)
                                                        EngineSteps(actor, rows)   what each decode step did

Messages are plain dataclasses: they pickle through multiprocessing and Ray
queues alike. The actor reports every sample as it finishes, so the
coordinator's schedule state frees its slot at once, as a router sees a
request complete; the coordinator groups them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FinishedRollout:
    """A rollout as the actor reports it: tokens, behaviour log-probs, versions and when each version ran."""

    sample: int
    tokens: list[int]
    logprobs: list[float]
    versions: list[int]
    start: float
    end: float
    segments: list[tuple[int, float, float, int]]  # (version, start, end, tokens)


# Commands: coordinator to actor.


@dataclass(frozen=True)
class Go:
    t0: float  # the run clock's zero, as time.time()


@dataclass(frozen=True)
class StartGroup:
    group: int
    requests: list[Any]  # executor.engine.Request, one per sample


@dataclass(frozen=True)
class LoadWeights:
    version: int


@dataclass(frozen=True)
class Stop:
    pass


Command = Go | StartGroup | LoadWeights | Stop


# Results: actor to coordinator.


@dataclass(frozen=True)
class Ready:
    actor: int


@dataclass(frozen=True)
class RolloutDone:
    actor: int
    group: int
    rollout: FinishedRollout


@dataclass(frozen=True)
class Loaded:
    actor: int
    version: int
    start: float
    end: float


@dataclass(frozen=True)
class ActorFailed:
    actor: int
    traceback: str


#: Columns of one engine step as an actor records it (seconds on the run clock, then StepStats' fields).
STEP_COLUMNS = ("start", "end", "batch", "context", "joins", "prefill_tokens", "retired")


@dataclass(frozen=True)
class EngineSteps:
    """The engine steps an actor took since its last report, one tuple of ``STEP_COLUMNS`` each."""

    actor: int
    rows: list[tuple[float, float, int, int, int, int, int]]


Result = Ready | RolloutDone | Loaded | ActorFailed | EngineSteps
