"""Candidate skeletons: windows of 2-4 normalized calls that follow the transition graph.

The transition graph (a networkx ``DiGraph``) has one node per normalized call
(``refuel_data(customer_id=$customer_id, ...)``) and an edge ``a -> b`` weighted
by how often the agent made ``b`` right after ``a`` (``weight``) and in how
many trajectories (``trajectories``).  Candidates are the paths of that graph
that trajectories actually walk, 2-4 steps long, each normalized as one window
so its slots carry the data flow between its steps::

    >>> graph = transition_graph(trajectories, normalizer)                 # doctest: +SKIP
    >>> candidates = enumerate_candidates(trajectories, normalizer, graph)  # doctest: +SKIP
    >>> candidates[0].support, [render(s) for s in candidates[0].steps]     # doctest: +SKIP
    (23, ['reset_apn_settings()', 'reboot_device()'])

A window with a failed step (an error observation) is never a candidate: the
executor never commits a draft that failed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import networkx as nx

from agentspec.macros import MacroStep
from agentspec.normalize import Normalizer, Skeleton, render
from agentspec.trajectories import MinedTrajectory

Occurrence = tuple[int, int]
"""(index of the trajectory, index of the window's first step)."""


@dataclass
class Candidate:
    """One skeleton and where it occurs."""

    key: str
    steps: tuple[MacroStep, ...]
    slots: dict[str, str]
    occurrences: list[Occurrence] = field(default_factory=list)
    flows: Counter[tuple[tuple[str, str], ...]] = field(default_factory=Counter)
    """How often each data-flow reading was seen (a value may come from an argument or an observation)."""

    @property
    def length(self) -> int:
        return len(self.steps)

    @property
    def support(self) -> int:
        return len(self.occurrences)

    @property
    def flow(self) -> dict[str, str]:
        """The most common data flow among the occurrences (ties: the first in sorted order)."""
        if not self.flows:
            return {}
        best = max(sorted(self.flows), key=lambda f: self.flows[f])
        return dict(best)


def _failed(trajectory: MinedTrajectory, index: int) -> bool:
    observation = trajectory.steps[index][1]
    return observation is not None and observation.error


def transition_graph(trajectories: Sequence[MinedTrajectory], normalizer: Normalizer) -> nx.DiGraph:
    """Normalized calls as nodes, consecutive calls as edges weighted by support."""
    graph = nx.DiGraph()
    for number, trajectory in enumerate(trajectories):
        keys = []
        for call in trajectory.calls:
            node = normalizer.node(call)
            if node.key not in graph:
                graph.add_node(node.key, label=render(node.steps[0]), name=call.name, count=0)
            graph.nodes[node.key]["count"] += 1
            keys.append(node.key)
        for a, b in pairwise(keys):
            if graph.has_edge(a, b):
                graph[a][b]["weight"] += 1
            else:
                graph.add_edge(a, b, weight=1, seen_in=set())
            graph[a][b]["seen_in"].add(number)
    for _, _, data in graph.edges(data=True):
        data["trajectories"] = len(data.pop("seen_in"))
    return graph


def enumerate_candidates(
    trajectories: Sequence[MinedTrajectory],
    normalizer: Normalizer,
    graph: nx.DiGraph,
    *,
    min_length: int = 2,
    max_length: int = 4,
    min_transition_support: int = 1,
) -> list[Candidate]:
    """Every skeleton of ``min_length..max_length`` steps walked in the trajectories.

    A walk stops at a failed step or at a transition seen fewer than
    ``min_transition_support`` times in the graph.  Sorted by support, then key.
    """
    found: dict[str, Candidate] = {}
    for number, trajectory in enumerate(trajectories):
        nodes = [normalizer.node(call).key for call in trajectory.calls]
        for start in range(len(trajectory.steps)):
            for end in range(start + 1, min(start + max_length, len(trajectory.steps)) + 1):
                if _failed(trajectory, end - 1):
                    break
                if end - start >= 2 and graph[nodes[end - 2]][nodes[end - 1]]["weight"] < min_transition_support:
                    break
                if end - start < min_length:
                    continue
                skeleton: Skeleton = normalizer.skeleton(trajectory.steps[start:end])
                candidate = found.get(skeleton.key)
                if candidate is None:
                    candidate = found[skeleton.key] = Candidate(skeleton.key, skeleton.steps, skeleton.slots)
                candidate.occurrences.append((number, start))
                candidate.flows[tuple(sorted(skeleton.flow.items()))] += 1
    return sorted(found.values(), key=lambda c: (-c.support, c.key))


def graph_statistics(graph: nx.DiGraph, candidates: Sequence[Candidate] = (), top: int = 5) -> dict[str, Any]:
    """Size and shape of the transition graph, its heaviest transitions, candidates per length."""
    weights = [data["weight"] for _, _, data in graph.edges(data=True)]
    heaviest = sorted(graph.edges(data=True), key=lambda e: (-e[2]["weight"], e[0], e[1]))[:top]
    out_degrees = [d for _, d in graph.out_degree()]
    stats: dict[str, Any] = {
        "nodes": graph.number_of_nodes(),
        "edges": graph.number_of_edges(),
        "transitions": sum(weights),
        "self_loops": nx.number_of_selfloops(graph),
        "density": round(nx.density(graph), 4) if graph.number_of_nodes() > 1 else 0.0,
        "weakly_connected_components": nx.number_weakly_connected_components(graph) if graph.number_of_nodes() else 0,
        "max_out_degree": max(out_degrees, default=0),
        "mean_out_degree": round(sum(out_degrees) / len(out_degrees), 3) if out_degrees else 0.0,
        "top_transitions": [
            {"from": graph.nodes[a]["label"], "to": graph.nodes[b]["label"], "weight": d["weight"], "trajectories": d["trajectories"]}
            for a, b, d in heaviest
        ],
    }
    if candidates:
        lengths = Counter(c.length for c in candidates)
        stats["candidates_by_length"] = {str(length): lengths[length] for length in sorted(lengths)}
    return stats
