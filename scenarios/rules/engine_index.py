"""The dispatcher's view of its engines, indexed so that a dispatch never scans every engine.

    an engine's load or version changes ──► EngineIndex.file(engine) ──► room:    version ─► engines with room
                                                                     └─► classes: (version, empty) ─► engines up

``ScheduleState`` (``scenarios.rules.state``) owns the engines' loads and asks the index two things: which engines
of each version can take a group (``room``), and which engines are up, by the version they hold and whether
they are empty (``classes``: ``policy.sync_target`` reads an engine's load only as empty or not, so it is
asked once per class, not once per engine, and neither a dispatch nor a publish costs more with more idle
engines). Both are exactly what a full scan would find; ``tests/test_state.py`` checks that against one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec.failures import NO_VERSION

Class = tuple[int, bool]  # (the version an engine holds, whether it is empty)


@dataclass
class EngineLoad:
    """One engine as the dispatcher sees it."""

    version: int = 0  # the weights it generates with, or has been told to load
    in_flight: int = 0  # samples started on it and not finished


class EngineIndex:
    """``room`` and ``classes`` of ``engines`` (the state's own list, and its set of engines ``down``)."""

    def __init__(
        self, engines: list[EngineLoad], down: set[int], capacity: int, group_size: int, first_version: int
    ) -> None:
        self.engines, self.down = engines, down
        self._capacity, self._group_size = capacity, group_size
        self.room: dict[int, set[int]] = {}  # version -> engines with room for a group
        self._filed: dict[int, int] = {}  # engine -> the version it is filed under in room
        self.classes: dict[Class, set[int]] = {}  # (version, empty) -> the engines up
        self._class_of: dict[int, Class] = {}  # engine -> its key in classes
        self._file_all(first_version)

    def file(self, engine: int) -> None:
        """Put ``engine`` in the indexes its state calls for, and out of the others."""
        state = self.engines[engine]
        down = engine in self.down
        has_room = not down and state.version != NO_VERSION and self._capacity - state.in_flight >= self._group_size
        room_version = state.version if has_room else None
        filed = self._filed.get(engine)
        if filed != room_version:  # (most calls: a load changed, the room and the version did not)
            if filed is not None:
                del self._filed[engine]
                self.room[filed].discard(engine)
                if not self.room[filed]:
                    del self.room[filed]
            if room_version is not None:
                self.room.setdefault(room_version, set()).add(engine)
                self._filed[engine] = room_version
        key = None if down else (state.version, state.in_flight == 0)
        old = self._class_of.get(engine)
        if old != key:
            if old is not None:
                self.classes[old].discard(engine)
                if not self.classes[old]:
                    del self.classes[old]
            if key is None:
                del self._class_of[engine]
            else:
                self.classes.setdefault(key, set()).add(engine)
                self._class_of[engine] = key

    def move_empty(self, key: Class, target: int, engines: tuple[int, ...]) -> None:
        """Empty engines of class ``key`` now hold ``target``: what ``file`` does for each of them, set by set
        (an empty engine has room for a group, and is up)."""
        old = self.classes[key]
        old.difference_update(engines)
        if not old:
            del self.classes[key]
        new = (target, True)
        self.classes.setdefault(new, set()).update(engines)
        self._class_of.update(dict.fromkeys(engines, new))
        room = self.room.get(key[0])
        if room is not None:
            room.difference_update(engines)
            if not room:
                del self.room[key[0]]
        self.room.setdefault(target, set()).update(engines)
        self._filed.update(dict.fromkeys(engines, target))
        for index in engines:
            self.engines[index].version = target

    def _file_all(self, first_version: int) -> None:
        """``file`` of every engine at the start, set by set: all are up, empty and hold the first version."""
        everyone = range(len(self.engines))
        key = (first_version, True)
        self.classes = {key: set(everyone)} if self.engines else {}
        self._class_of = dict.fromkeys(everyone, key)
        if self.engines and first_version != NO_VERSION and self._capacity >= self._group_size:
            self.room = {first_version: set(everyone)}
            self._filed = dict.fromkeys(everyone, first_version)
