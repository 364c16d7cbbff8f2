"""One status vocabulary for every row that stands for runs: the run summary's, a study cell's, a validate row's.

    summary.json "status" (RunStatus) ─► cells.csv "status"     (analysis.summaries.study, asyncrl.experiments.study)
                                      └► validate.csv "status"  (analysis.summaries.validation, asyncrl.experiments.validate)

A row whose runs completed is ``complete``, one whose run was interrupted ``interrupted``, any other
that did not finish ``failed``. Tables read back from disk may predate the shared words: ``read_status``
takes an older ``ok`` as ``complete``.
"""

from __future__ import annotations

from typing import Final, get_args

from ..scenarios.record.record import RunStatus

COMPLETE: Final[RunStatus] = "complete"
INTERRUPTED: Final[RunStatus] = "interrupted"
FAILED: Final[RunStatus] = "failed"
#: Every status, in RunStatus's order.
STATUSES: Final[tuple[RunStatus, ...]] = get_args(RunStatus)
#: cells.csv and validate.csv written before the rows took the run summaries' words said "ok" for complete.
_OLDER_WORDS: Final[dict[str, RunStatus]] = {"ok": COMPLETE}


def unfinished_note(label: str, status: str | None, steps: int, planned: int | None) -> str | None:
    """``label ended interrupted after 93 of 400 planned steps: ...`` for a run that did not complete; None for
    one that did (or a simulated run, which has no status)."""
    if status is None or status == COMPLETE:
        return None
    of = f" of {planned:,} planned" if planned is not None else ""
    return f"{label} ended {status} after {steps:,}{of} steps: its figures are those of a partial run"


def read_status(value: object) -> str:
    """A status as a table read back from disk holds it: stripped, an older ``ok`` read as ``complete``."""
    text = str(value).strip()
    return _OLDER_WORDS.get(text, text)
