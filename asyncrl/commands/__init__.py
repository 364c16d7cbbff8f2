"""The ``asyncrl`` commands, one module per family; ``asyncrl.cli`` only parses and dispatches.

    runs         simulate, execute                 one scenario, predicted or run for real
    calibrate    calibrate                         a cost profile from short runs, benchmarks, runs or logs
    experiments  demo, validate, study             workflows over many runs
    planning     speedup, size, plan, penalty      plans compared, ranked and fitted
    sweeps       sweep                             what-if grids over any scenario keys
    records      compare, report, trace            what run records say
    inputs       lengths                           a scenario's completion lengths from logs
    importers    from-verl, from-openrlhf,         a scenario from a framework's config or launch script
                 from-nemo-rl
    catalog      schema, list                      what a scenario may say

Each module defines ``add_parsers(commands)``, which adds its commands' parsers and sets each one's
handler (``args.command``, a function of the parsed arguments returning the exit status). What they
share (scenario arguments, default output names, progress bars) is ``asyncrl.commands.common``.
"""

from __future__ import annotations

from asyncrl.commands import calibrate, catalog, experiments, importers, inputs, planning, records, runs, sweeps

#: The families, in the order ``asyncrl --help`` lists their commands.
FAMILIES = (runs, calibrate, experiments, planning, sweeps, records, inputs, importers, catalog)
