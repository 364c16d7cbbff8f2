"""The repository root, seen as the package it installs as: ``asyncrl`` (``pyproject.toml`` maps each folder
below to ``asyncrl.<folder>``). Nothing imports this file; it lets a reader's tools resolve the parts' relative
imports (``simulator/engine.py``'s ``from ..scenarios.rules import policy`` is ``scenarios/rules/policy.py``)."""
