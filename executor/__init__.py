"""Real runs of a scenario's schedule with torch and transformers.

    runtime (learner + coordinator) ──commands──► actors (continuous-batching engines)
            ◄──finished groups── actors           weights ──torch.distributed──► actors

See ``executor/runtime.py`` for the process layout and ``docs/executor.md``.
"""
