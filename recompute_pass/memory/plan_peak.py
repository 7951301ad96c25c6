"""A plan's predicted peak straight from the joint graph, without extracting its graphs.

Peak budgets score dozens of plans per graph, and extraction builds two ``GraphModule``s
per plan (seconds on a 12-layer model). This replays what extraction and the
autograd-order reordering would emit, on the joint graph's own nodes, and walks it with
``liveness``:

- forward: the forward nodes in graph order, plus the backward-only values the plan saves
  (extraction computes those in forward);
- backward: from the first node that reads a tangent, each backward node in graph order,
  preceded by the recomputed values it still lacks, in graph order: recomputation just in
  time, as ``reordering_to_mimic_autograd_engine`` places it.

``tests/eager/test_liveness.py`` checks it against the prediction on the extracted graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from torch import fx

from cost_model import SizeHints
from recompute_pass import torch_internals as ti
from recompute_pass.graph.joint_graph import JointGraph
from recompute_pass.memory.liveness import NodeFacts, PeakEstimate, Walk


@dataclass(frozen=True)
class JointSchedule:
    """What does not depend on the plan, computed once per graph."""

    order: dict[fx.Node, int]
    forward: frozenset[fx.Node]  # call nodes required in forward
    backward: frozenset[fx.Node]  # backward-only call nodes
    tangents: tuple[fx.Node, ...]
    user_outputs: frozenset[fx.Node]
    gradients: frozenset[fx.Node]  # backward outputs
    facts: NodeFacts  # shared by every plan's walk

    @staticmethod
    def of(joint: JointGraph, hints: SizeHints) -> JointSchedule:
        nodes = list(joint.module.graph.nodes)
        info = joint.node_info
        (output,) = joint.module.graph.find_nodes(op="output")
        values = [v for v in output.args[0] if isinstance(v, fx.Node)]
        calls = [n for n in nodes if n.op == "call_function"]
        return JointSchedule(
            order={node: i for i, node in enumerate(nodes)},
            forward=frozenset(n for n in calls if info.is_required_fw(n)),  # type: ignore[attr-defined]
            backward=frozenset(n for n in calls if not info.is_required_fw(n)),  # type: ignore[attr-defined]
            tangents=tuple(n for n in nodes if ti.is_tangent(n)),
            user_outputs=frozenset(output.args[0][: joint.num_fwd_outputs]) & frozenset(values),
            gradients=frozenset(output.args[0][joint.num_fwd_outputs :]) & frozenset(values),
            facts=NodeFacts(hints),
        )

    def peak(
        self,
        saved: set[fx.Node],
        recomputed: set[fx.Node],
        states: dict[str, int],
    ) -> PeakEstimate:
        """``states``: bytes of generator state saved per replayed draw (by node name)."""
        backward_saved = self._closure(saved & self.backward, lambda n: n in self.backward)
        forward = self._sorted(self.forward | backward_saved)
        walk = Walk(self.facts)
        walk.run("forward", forward, saved | self.user_outputs, extra=states)
        forward_end, caller = walk.live, walk.held_by(forward, self.user_outputs)
        for tangent in self.tangents:  # autograd's incoming gradients
            walk.allocate(tangent, tangent.name, tangent.meta.get("val"))
        tangents = walk.live - forward_end
        walk.run(
            "backward", self.backward_order(saved, recomputed), set(self.gradients), releases=states.keys()
        )
        return walk.estimate().with_boundaries(forward_end, caller, tangents)

    def backward_order(self, saved: set[fx.Node], recomputed: set[fx.Node]) -> list[fx.Node]:
        """What backward computes, in the order it runs: its own nodes but the saved ones,
        and the recomputed ones, as far as the gradients need them (extraction's
        dead-code elimination)."""
        members = (self.backward - saved) | recomputed
        return self._backward_order(self._closure(self.gradients, lambda n: n in members))

    def _sorted(self, nodes: Iterable[fx.Node]) -> list[fx.Node]:
        return sorted(nodes, key=self.order.__getitem__)

    def _closure(self, roots: Iterable[fx.Node], within: Callable[[fx.Node], bool]) -> set[fx.Node]:
        """``roots`` and their ancestors, through nodes ``within`` accepts."""
        inputs = self.facts.inputs
        found: set[fx.Node] = set()
        stack = [n for n in roots if within(n)]
        while stack:
            node = stack.pop()
            if node not in found:
                found.add(node)
                stack += [n for n in inputs(node) if within(n)]
        return found

    def _backward_order(self, members: set[fx.Node]) -> list[fx.Node]:
        order = self.order
        starts = [user for tangent in self.tangents for user in tangent.users if user in members]
        first = min((order[n] for n in starts), default=-1)
        emitted: set[fx.Node] = set()
        result: list[fx.Node] = []
        inputs = self.facts.inputs
        for node in self._sorted(members):
            if order[node] < first or node in emitted:
                continue
            if all(n not in members or n in emitted for n in inputs(node)):  # most nodes: ready alone
                emitted.add(node)
                result.append(node)
                continue
            ready = self._closure([node], lambda n, done=emitted: n in members and n not in done)
            emitted |= ready
            result += self._sorted(ready)
        return result
