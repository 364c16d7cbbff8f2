"""NeMo-RL: its GRPO config read as NeMo-RL reads it (config.py), its scenario (importer.py), and
``from-nemo-rl`` (command.py)."""

from asyncrl.frameworks.common.framework import Framework
from asyncrl.frameworks.nemo_rl import command

FRAMEWORK = Framework(
    name="nemo_rl",
    label="NeMo-RL",
    costs="nemo-rl",
    modules=("nemo_rl", "examples"),
    config_keys=("grpo", "policy"),
    setting="NeMo-RL key",
    command="from-nemo-rl",
    help="a scenario from the NeMo-RL GRPO config (recipe) you run",
    add_arguments=command.add_arguments,
    scenario=command.nemo_rl_scenario,
)
