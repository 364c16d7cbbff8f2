"""AReaL: its fixed costs per step, and its configs and launch commands recognised. asyncrl reads none of
its settings yet, so a command given an AReaL config says so and asks for a scenario instead; its published
runs are predicted from scenarios written by hand (``benchmarks/published_areal.py``)."""

from asyncrl.frameworks.common.framework import Framework

FRAMEWORK = Framework(
    name="areal",
    label="AReaL",
    costs="areal",
    modules=("areal",),
    config_keys=("allocation_mode", "gconfig"),
)
