"""The one error a scenario raises: its message starts with the field's dotted path.

Its own module, importing nothing, so every part of ``scenarios/`` can raise it without importing
the loader (``loading`` imports ``scenario``, which imports ``memory``, which raises it).
"""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario that cannot be used, with a message that names the field."""
