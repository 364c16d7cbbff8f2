"""What the supported transformers versions (4.56 to 5.x, see pyproject) name differently, in one place.

    the KV cache argument and output field   4.x, 5.0-5.2x: ``past_key_values``   later 5.x: ``cache``
                                              (5.2x still accept ``past_key_values``, with a warning, until 5.40)
    the config base class                     ``PretrainedConfig`` in every version (5.x adds ``PreTrainedConfig``)

The engine asks the model's own ``forward`` which name it takes, so it never relies on a deprecated alias.
``scripts/test-transformers.sh VERSION`` runs the engine's exactness tests under one version.
"""

from __future__ import annotations

import inspect
from typing import Any

from transformers import PretrainedConfig, PreTrainedModel

__all__ = ["PretrainedConfig", "cache_keyword", "output_cache"]

NEW_CACHE_KEYWORD = "cache"
OLD_CACHE_KEYWORD = "past_key_values"


def cache_keyword(model: PreTrainedModel) -> str:
    """The name under which ``model.forward`` takes a KV cache (and its output returns one)."""
    parameters = inspect.signature(type(model).forward).parameters
    return NEW_CACHE_KEYWORD if NEW_CACHE_KEYWORD in parameters else OLD_CACHE_KEYWORD


def output_cache(output: Any, keyword: str) -> Any:
    """The KV cache a forward returned, read under the same name it was passed with."""
    return getattr(output, keyword)
