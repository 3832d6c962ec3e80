"""Episodes on a Ray cluster (``agentspec run --ray [ADDRESS]``, ``RunSpec.cluster``): the optional ``ray`` extra.

Importing this package does not import Ray; :class:`RayStrategy` does, when a run names a cluster.  Without one,
nothing imports this package.  It is the batch layer's Ray strategy: it imports :mod:`agentspec.batch` (the
mode's run log, its resume, the clock, one episode's play), and nothing above it.

* :mod:`agentspec.cluster.ray_episodes`: the driver (connect, place, stream results back, merge run logs);
* :mod:`agentspec.cluster.worker`: what a worker runs for one episode;
* :mod:`agentspec.cluster.parts`: per-task run logs and their atomic merge.
"""

from __future__ import annotations

from agentspec.cluster.ray_episodes import (
    DEFAULT_ADDRESS,
    ClusterError,
    RayStrategy,
    episode_resources,
)

__all__ = ["DEFAULT_ADDRESS", "ClusterError", "RayStrategy", "episode_resources"]
