"""Rolling updates of a replicated cluster: one replica index at a time.

StatefulSet ``NAME`` (replica 0 of every set) rolls under ``planning.rollout``: one pod at
a time, each confirmed healthy before the next. The replica StatefulSets ``NAME-r1`` and
``NAME-r2`` must not roll at the same time as ``NAME`` or as each other, or set ``i``
would lose two or three of its replicas at once. So replica ``r``'s partition is:

* 0 when its StatefulSet does not exist yet (creating pods is not gated), or when every
  lower replica index has settled: ``NAME`` with no rollout pending, and each
  ``NAME-r<k>`` (k < r) on its latest template with every pod updated and Ready. The
  StatefulSet controller then replaces its pods one at a time (highest ordinal first, each
  once the one before is Ready): one replica of one set away at a time. A leader among
  them hands over on its way out (its graceful stop releases the set's Lease);
* else its ``replicas`` (hold): no pod of it is replaced, and one deleted meanwhile comes
  back on the revision it had.

Pure: the caller reads the StatefulSets and builds the templates' hashes.
"""

from __future__ import annotations

from collections.abc import Sequence

from popfleet_operator.model.observations import StatefulSetState


def settled(state: StatefulSetState | None, *, built_hash: str, replicas: int) -> bool:
    """The StatefulSet runs the template this round builds, on every pod, all Ready."""
    return (
        state is not None
        and state.status_current
        and state.template_hash == built_hash
        and state.current_revision == state.update_revision
        and state.updated_replicas >= replicas
        and state.ready_replicas >= replicas
    )


def partitions(
    *,
    replicas: int,
    first_settled: bool,
    states: Sequence[StatefulSetState | None],
    built_hashes: Sequence[str],
) -> list[int]:
    """The partitions of ``NAME-r1``, ``NAME-r2``, ... (``states``/``built_hashes`` in that
    order); ``first_settled``: ``NAME`` has no rollout pending."""
    out = []
    lower_settled = first_settled
    for state, built in zip(states, built_hashes, strict=True):
        out.append(0 if state is None or lower_settled else replicas)
        lower_settled = lower_settled and settled(state, built_hash=built, replicas=replicas)
    return out
