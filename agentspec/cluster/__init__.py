"""Episodes on a Ray cluster (``agentspec run --ray [ADDRESS]``, ``RunSpec.cluster``): the optional ``ray`` extra.

Importing this package does not import Ray; :func:`run_mode_on_ray` does, when a run names a cluster.  Without
one, :mod:`agentspec.assembly` never imports this package; with one, it hands over a :class:`Playbook` (its own
functions that build and play an episode), so nothing here imports the assembly back.

* :mod:`agentspec.cluster.ray_episodes`: the driver (connect, place, stream results back, merge run logs);
* :mod:`agentspec.cluster.worker`: what a worker runs for one episode;
* :mod:`agentspec.cluster.parts`: per-task run logs and their atomic merge.
"""

from __future__ import annotations

from agentspec.cluster.ray_episodes import (
    DEFAULT_ADDRESS,
    ClusterError,
    episode_resources,
    run_mode_on_ray,
)
from agentspec.cluster.worker import Playbook

__all__ = ["DEFAULT_ADDRESS", "ClusterError", "Playbook", "episode_resources", "run_mode_on_ray"]
