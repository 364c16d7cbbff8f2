"""Every group and sample a simulated run started: the live state engines read and write.

    Simulation ──start(group ...)──► Rollouts ◄── engines: finish / un-finish samples
                                        │
                                        └──► Recorder.events (once, at the end)

Sample ``s`` belongs to group ``s // samples_per_prompt``; lists are indexed by
group id or sample id, which are handed out in start order. Engines set a
sample's end when it finishes and clear it again when an interrupt undoes a
finish they had applied ahead (``Engine.settle``).
"""

from __future__ import annotations

import math

from asyncrl.simulator.budget import over_budget


class Rollouts:
    def __init__(self, group_size: int, max_samples: int | None = None) -> None:
        self.group_size = group_size
        self.max_samples = max_samples  # the memory budget (``simulator.budget``): more started is an error
        # Per group.
        self.engine: list[int] = []
        self.start: list[float] = []
        self.version: list[int] = []
        self.prompt: list[int] = []  # prompt tokens
        self.join: list[float] = []  # the engine's progress when the group joined it
        self.loads_seen: list[int] = []  # loads its engine had made before the group started
        self.remaining: list[int] = []  # samples not finished yet
        self.step: list[int] = []  # learner step that trained it, -1 if none
        # Per sample.
        self.tokens: list[int] = []  # completion tokens
        self.end: list[float] = []  # NaN until finished

    def start_group(
        self, engine: int, now: float, version: int, prompt: int, join: float, loads_seen: int, lengths: list[int]
    ) -> None:
        """Record the next group (its id is the number of groups before it)."""
        if self.max_samples is not None and len(self.end) + len(lengths) > self.max_samples:
            raise over_budget(len(self.end) + len(lengths), self.max_samples)
        self.engine.append(engine)
        self.start.append(now)
        self.version.append(version)
        self.prompt.append(prompt)
        self.join.append(join)
        self.loads_seen.append(loads_seen)
        self.remaining.append(self.group_size)
        self.step.append(-1)
        self.tokens.extend(lengths)
        self.end.extend([math.nan] * len(lengths))

    def trained(self, groups: list[int], step: int) -> None:
        for group in groups:
            self.step[group] = step

    def __len__(self) -> int:
        """Groups started."""
        return len(self.start)
