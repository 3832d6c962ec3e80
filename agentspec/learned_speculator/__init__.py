"""A speculator fitted to past trajectories: next calls predicted in microseconds, with no model.

It learns, from a bench's gold calls and earlier runs' episodes, which call comes next (rules over task-text words,
the calls so far and fields of earlier results, backed off to n-grams over normalised calls), where each argument
comes from (the task text, an earlier call, a field of an earlier result, a read-only look-ahead call's result, or a
constant), and which read-only calls are worth running in a fork before guessing.  Nothing here names a bench,
a tool or a domain: everything comes from the trajectories, the tool schemas and the task text.

- :mod:`~agentspec.learned_speculator.fit` fits, :mod:`~agentspec.learned_speculator.artifact` saves and loads (one JSON file),
  :mod:`~agentspec.learned_speculator.model` predicts ranked guesses, :mod:`~agentspec.learned_speculator.policy` is the
  speculator a run uses (``--speculator-model learned:FILE``), :mod:`~agentspec.learned_speculator.lookahead` runs
  look-ahead calls in forks, :mod:`~agentspec.learned_speculator.online` keeps learning during a run,
  :mod:`~agentspec.learned_speculator.score` measures hit rates (``agentspec speculator score``).
"""
