"""Scenarios and the schedule rules both backends share."""

from asyncrl.compiled import native_dirs

__path__[:0] = native_dirs("scenarios")  # the hot modules compiled, when built (``asyncrl.compiled``)
