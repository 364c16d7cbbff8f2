"""Actor deaths during a run: restart the actor, or, past ``--max-restarts``, fail the run as before.

    receiver thread, every pass ──► Restarts.watch()
        planned failures due (run.failures) ──► workers.kill(engine)                    (SIGKILL, or ray.kill)
        workers.dead(): an actor whose current incarnation died, all its messages read
            restarts left ──► coordinator.engine_lost(engine)   its unfinished groups go out again (to others)
                              ActorProcesses.respawn(engine)     a new process: fresh commands, pipe, weight group
                              a thread: join its weight group ──► its Ready ──► (run.failures.restart_s) ──►
                                        coordinator.engine_restored(engine)    it loads the latest weights, takes work
            none left     ──► coordinator.fail(why)  ──► the learner raises WorkerFailed: the run fails (partial record)

The schedule's side of a death (which groups go out again, with which weights) is
``scenarios.spec.failures``', applied by the coordinator's ``ScheduleState``; this module
only keeps the processes coming back. A replacement that dies while it starts is
one more death (and one more restart). Deaths while the run starts (before the
actors are ready) are not restarted: nothing has been generated yet, and the run
fails at once, as a configuration error should.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ...scenarios.spec.failures import Failure, failure_plan
from .messages import Go

if TYPE_CHECKING:
    from ...scenarios.spec.scenario import Scenario
    from .actors import ActorProcesses
    from .coordinator import Coordinator

#: ``--max-restarts``' default: actor restarts one run may make before a death fails it.
DEFAULT_MAX_RESTARTS = 3


class Stale(Exception):
    """A restart overtaken by another death of the same actor."""


class Restarts:
    """Watches the actors of a run that has started; restarts those that die, up to ``max_restarts``."""

    def __init__(
        self,
        scenario: Scenario,
        actors: ActorProcesses,
        coordinator: Coordinator,
        max_restarts: int,
        clock: Callable[[], float],
    ) -> None:
        self.actors, self.coordinator, self.clock = actors, coordinator, clock
        self.max_restarts = max_restarts
        self.used = 0
        failures = scenario.run.failures
        self.restart_s = failures.restart_s if failures is not None and failures.restart_s is not None else 0.0
        self._plan: Iterator[Failure] = failure_plan(failures, scenario.cluster.engines, scenario.run.seed)
        self._next: Failure | None = next(self._plan, None)
        self._ready = [threading.Event() for _ in range(scenario.cluster.engines)]
        self._killed_at: dict[int, float] = {}  # engines killed on plan, when: their death's time
        self._given_up = False

    def watch(self) -> None:
        """Kill the engines whose planned failure is due, then restart the actors that died."""
        self._inject()
        assert self.actors.workers is not None
        for index, why in sorted(self.actors.workers.dead().items()):
            self._died(index, why)

    def due_in(self) -> float:
        """Seconds until the next planned failure (inf: none), so the receiver looks in time."""
        return self._next.time - self.clock() if self._next is not None else float("inf")

    def ready(self, index: int) -> None:
        """A restarted actor has its engine up."""
        self._ready[index].set()

    def _inject(self) -> None:
        assert self.actors.workers is not None
        while self._next is not None and self.clock() >= self._next.time:
            engine = self._next.engine
            if engine not in self.coordinator.down() and engine not in self._killed_at:  # down: nothing to lose
                self._killed_at[engine] = self.clock()
                self.actors.workers.kill(engine)
            self._next = next(self._plan, None)

    def _died(self, index: int, why: str) -> None:
        if self._given_up:
            return
        reason = self.coordinator.tracebacks.pop(index, "")
        if self.used >= self.max_restarts:
            self._given_up = True
            used = f"{self.used} restart(s) used" if self.used else "no restarts"
            self.coordinator.fail(f"{why} ({used}; --max-restarts {self.max_restarts}){reason}")
            return
        self.used += 1
        print(f"asyncrl: {why}; restarting it ({self.used} of at most {self.max_restarts})", file=sys.stderr)
        died_at = self._killed_at.pop(index, self.clock())
        self.coordinator.engine_lost(index, died_at)
        self._ready[index].clear()
        spec = self.actors.respawn(index)
        threading.Thread(
            target=self._bring_back,
            args=(index, spec.incarnation, died_at),
            name=f"asyncrl-restart-{index}",
            daemon=True,
        ).start()

    def _bring_back(self, index: int, incarnation: int, died_at: float) -> None:
        """The replacement's start, in its own thread: its weight group, its Ready, then back to work."""

        def still_current() -> None:
            if self.actors.specs[index].incarnation != incarnation:
                raise Stale

        try:
            self.actors.commands[index].put(Go(time.time() - self.clock()))  # the run's clock zero, read once it is up
            self.actors.join(index, still_current)
            while not self._ready[index].wait(timeout=0.2):
                still_current()
            time.sleep(max(0.0, died_at + self.restart_s - self.clock()))
            still_current()
            self.coordinator.engine_restored(index, died_at)
        except Stale:
            return  # it died again: the next restart has taken over
        except Exception as exc:  # the group would not form: the run cannot go on without this engine
            self.coordinator.fail(f"actor {index} could not be restarted: {exc}")
