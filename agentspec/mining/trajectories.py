"""Successful trajectories to mine: they live in :mod:`agentspec.trajectories` (below mining and the learned
speculator, which both read them); re-exported here for the mining modules and their users."""

from __future__ import annotations

from agentspec.trajectories import (
                                    GoldBench,
                                    MinedTrajectory,
                                    Step,
                                    deduplicate,
                                    gold_trajectories,
                                    read_results,
                                    read_runs,
                                    trajectory_from_messages,
)

__all__ = ["GoldBench", "MinedTrajectory", "Step", "deduplicate", "gold_trajectories", "read_results", "read_runs",
           "trajectory_from_messages"]
