"""``agentspec report``: one self-contained HTML page that shows where a run's time went.

Built from one or more run folders (``results.json`` and the run logs): a summary table per mode, task-time
distributions, speculation quality (hits by chain depth, macro firings and reliability, SPORK probes), token
level statistics where the run used ``agentspec serve --decoder toolspec``, and per task the timeline, the
committed trajectory with each step's source, and the reward checks::

    from agentspec.report.command import write_report
    write_report([Path("runs/modes")], Path("runs/modes/report.html"))

Modules: :mod:`.load` reads runs, :mod:`.tables` computes every figure, :mod:`.figures` draws (one task's
execution with :mod:`.timeline`, also ``agentspec run --timeline``'s PNG),
:mod:`.command` renders ``templates/report.html.j2`` (the CLI parser is :mod:`agentspec.cli.report`).
"""
