"""What the coordinator and the actor processes say to each other, as typed messages.

    coordinator ──commands[i]──► actor i                      actor i ──results──► coordinator
    Go(t0)                      start the run clock         Ready(actor)
    StartGroups(StartGroup, …)  generate these, together    StepFinished(actor, done)   what one step finished
    LoadWeights(version)        receive weights, load them  Loaded(actor, version, start, end)
    Stop()                      leave the loop              ActorFailed(actor, traceback)
                                                            EngineSteps(actor, steps)  what each decode step did

Messages are plain dataclasses: they pickle through multiprocessing and Ray
queues alike. The actor reports every sample as it finishes, so the
coordinator's schedule state frees its slot at once, as a router sees a
request complete; the coordinator groups them. Samples that finish in the same
engine step travel in one ``StepFinished`` (a ``RolloutDone`` each): the
coordinator decides on all of them at once, as the simulator does for samples
finishing at the same instant, not on however many the queue's pipe had
delivered when it looked (a part of a step's finishes could show a queue not
yet full and start groups the whole step would have blocked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


class Segment(NamedTuple):
    """A run of a rollout's tokens that one weights version produced, and when it ran."""

    version: int
    start: float
    end: float
    tokens: int


@dataclass(frozen=True)
class FinishedRollout:
    """A rollout as the actor reports it: tokens, behaviour log-probs, versions and when each version ran."""

    sample: int
    tokens: list[int]
    logprobs: list[float]
    versions: list[int]
    start: float
    end: float
    segments: list[Segment]  # in token order


# Commands: coordinator to actor.


@dataclass(frozen=True)
class Go:
    t0: float  # the run clock's zero, as time.time()


@dataclass(frozen=True)
class StartGroup:
    group: int
    requests: list[Any]  # executor.generation.engine.Request, one per sample


@dataclass(frozen=True)
class StartGroups:
    """The groups one dispatch gives an engine, sent together so that the engine admits them in the same
    step, as the simulator starts them at the same instant (sent one by one, an idle actor could wake on
    the first and prefill it a step before the rest arrive)."""

    starts: tuple[StartGroup, ...]


@dataclass(frozen=True)
class LoadWeights:
    version: int


@dataclass(frozen=True)
class Stop:
    pass


Command = Go | StartGroups | LoadWeights | Stop


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
class StepFinished:
    """The samples one engine step finished, in the order the engine returned them."""

    actor: int
    done: tuple[RolloutDone, ...]


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


class EngineStep(NamedTuple):
    """One engine step as an actor records it: its span on the run clock, then ``engine.StepStats``' fields."""

    start: float
    end: float
    batch: int
    context: int
    joins: int
    prefill_tokens: int
    retired: int


#: Columns of the run's engine-step table (engine_steps.parquet) besides the worker.
STEP_COLUMNS = EngineStep._fields


@dataclass(frozen=True)
class EngineSteps:
    """The engine steps an actor took since its last report."""

    actor: int
    steps: list[EngineStep]


Result = Ready | RolloutDone | StepFinished | Loaded | ActorFailed | EngineSteps
