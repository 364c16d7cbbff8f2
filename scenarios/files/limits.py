"""What a scenario may ask for: numbers that are finite, integers that are not booleans, and upper limits.

    scenario file ──► these field types ──► ScenarioError "run.seed: Input should be less than or equal to ..."

The limits follow from what the simulator holds per unit (``simulator.budget``
checks the totals against this machine's memory before a run):

* ``MAX_CONCURRENCY`` rollouts per engine: the simulator keeps a decode-step
  table with one entry per batch size up to it (vLLM's own default is 256);
* ``MAX_DEVICES`` per role: every engine is a live object with its own process
  in the simulation, and a process on the executor;
* ``MAX_TOKENS`` per prompt or completion: no model serves a longer context,
  and lengths stay far from int64 and float rounding;
* ``MAX_SIGMA`` for a lognormal tail: beyond it nearly every draw is 1 token
  or the cap;
* ``MAX_STEPS``, ``MAX_SEED``: learner steps, and seeds torch and numpy accept.

Integers refuse ``true``/``false`` (YAML reads ``steps: true`` as a boolean,
which Python would take for 1) and floats refuse booleans, infinities and NaN.
These types replace pydantic's ``PositiveInt`` and friends in the scenario models.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

MAX_CONCURRENCY = 65_536
MAX_DEVICES = 65_536
MAX_TOKENS = 10_000_000
MAX_SIGMA = 10.0
MAX_STEPS = 10_000_000
MAX_SEED = 2**32 - 1
#: Largest scenario or profile file read (a scenario is a few hundred bytes).
MAX_SCENARIO_FILE_BYTES = 1 << 20
#: Largest lengths file read (about 8 million lengths).
MAX_LENGTHS_FILE_BYTES = 64 << 20


def _refuse_bool(kind: str) -> BeforeValidator:
    def check(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"Input should be {kind}, not {str(value).lower()}")
        return value

    return BeforeValidator(check)


_Int = _refuse_bool("an integer")
_Number = _refuse_bool("a number")

PositiveInt = Annotated[int, _Int, Field(gt=0)]
NonNegativeInt = Annotated[int, _Int, Field(ge=0)]
PositiveFloat = Annotated[float, _Number, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, _Number, Field(ge=0, allow_inf_nan=False)]

Devices = Annotated[int, _Int, Field(gt=0, le=MAX_DEVICES)]
Concurrency = Annotated[int, _Int, Field(gt=0, le=MAX_CONCURRENCY)]
Steps = Annotated[int, _Int, Field(gt=0, le=MAX_STEPS)]
Seed = Annotated[int, _Int, Field(ge=0, le=MAX_SEED)]
Tokens = Annotated[int, _Int, Field(gt=0, le=MAX_TOKENS)]
TokensFloat = Annotated[float, _Number, Field(gt=0, le=MAX_TOKENS, allow_inf_nan=False)]
Sigma = Annotated[float, _Number, Field(gt=0, le=MAX_SIGMA, allow_inf_nan=False)]
Fraction = Annotated[float, _Number, Field(gt=0.0, le=1.0)]
