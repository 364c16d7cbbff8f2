"""verl: its trainer config and launch scripts (config.py, defaults.py, keys.py, learner.py, importer.py), the
config its console log prints (printed.py), its metrics log's phases (log_phases.py) and lengths
(log_lengths.py), its rollout dumps (rollout_dumps.py), and ``from-verl`` (command.py)."""

from asyncrl.frameworks.common.framework import Framework
from asyncrl.frameworks.verl import command

FRAMEWORK = Framework(
    name="verl",
    label="verl",
    costs="verl",
    modules=("verl", "recipe"),
    config_keys=("actor_rollout_ref",),
    setting="verl key",
    command="from-verl",
    help="a scenario from the verl trainer config or launch script you use",
    add_arguments=command.add_arguments,
    scenario=command.verl_scenario,
    prints_config=command.prints_config,
    scenario_from_log=command.scenario_from_log,
    rollout_dumps=command.rollout_dumps,
    metrics_lengths=command.metrics_lengths,
)
