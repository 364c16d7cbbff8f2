"""OpenRLHF: its launch flags (flags.py), their scenario (importer.py), and ``from-openrlhf`` (command.py)."""

from asyncrl.frameworks.common.framework import Framework
from asyncrl.frameworks.openrlhf import command

FRAMEWORK = Framework(
    name="openrlhf",
    label="OpenRLHF",
    costs="openrlhf",
    modules=("openrlhf",),
    command="from-openrlhf",
    help="a scenario from the OpenRLHF launch script or command you use (train_ppo_ray's flags)",
    add_arguments=command.add_arguments,
    scenario=command.openrlhf_scenario,
)
