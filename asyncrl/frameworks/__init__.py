"""One folder per framework asyncrl reads (verl, OpenRLHF, NeMo-RL, AReaL), listed in registry.py."""
