"""Fan-out to every broker through the admin API: apply, **read back**, report per broker.

Each ``sync_*`` round, per broker and concurrently across brokers:

1. ``info`` (the config epoch, for status and for noticing a broker that came back empty);
2. read the broker's current state; write only what differs (``planning.brokerconfig``);
3. after any write, read back again; ``synced`` is judged on what the broker answered, never
   on what was sent.

A retriable admin error (unreachable, deadline) marks the broker ``reachable=False``; any
other error is the broker refusing (``error`` carries its reason). Nothing here raises
``AdminError``: one broker failing never hides the others' results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from popfleet_api import errors as admin_errors
from popfleet_api import models
from popfleet_api.client import BrokerAdminApi
from popfleet_operator.model.observations import (
    BrokerInfo,
    BrokerOutcome,
    BrokerPod,
    GroupOutcome,
    TopicOutcome,
)
from popfleet_operator.model.specs import GroupSpec, TopicSpec
from popfleet_operator.planning import brokerconfig, membership

Admins = Mapping[str, BrokerAdminApi]


_T = TypeVar("_T")
_O = TypeVar("_O", bound=BrokerOutcome)


def _failed(outcome: type[_O], broker: str, exc: admin_errors.AdminError) -> _O:
    return outcome(broker, synced=False, reachable=not exc.retriable, error=str(exc))


async def _each(admins: Admins, step: Callable[[str, BrokerAdminApi], Awaitable[_T]]) -> list[_T]:
    names = sorted(admins)
    return list(await asyncio.gather(*(step(name, admins[name]) for name in names)))


# ---------------------------------------------------------------- brokers and members


async def observe(pods: Sequence[BrokerPod], admins: Admins) -> list[BrokerInfo]:
    async def one(pod: BrokerPod) -> BrokerInfo:
        admin = admins.get(pod.name)
        if admin is None:
            return BrokerInfo(pod, reachable=False, error="no pod IP yet")
        try:
            info = await admin.info()
        except admin_errors.AdminError as exc:
            return BrokerInfo(pod, reachable=False, error=str(exc))
        return BrokerInfo(
            pod,
            reachable=True,
            config_epoch=info.config_epoch,
            serving=info.ready,
            error=info.last_error,
        )

    return list(await asyncio.gather(*(one(pod) for pod in pods)))


async def push_members(admins: Admins, desired: Sequence[models.Member]) -> dict[str, str]:
    """Set the member list on every broker whose list differs; broker -> error ("" = ok)."""

    async def one(name: str, admin: BrokerAdminApi) -> str:
        try:
            if membership.needs_push(await admin.members(), desired):
                stored = await admin.set_members(desired)
                if membership.needs_push(stored, desired):
                    return f"broker stored {stored} instead"
        except admin_errors.AdminError as exc:
            return str(exc)
        return ""

    results = await _each(admins, one)
    return dict(zip(sorted(admins), results, strict=True))


# ---------------------------------------------------------------- topics


async def _find_topic(admin: BrokerAdminApi, name: str) -> models.Topic | None:
    """The broker's topic ``name`` (or None): one by-name read, not a list of every topic."""
    return next(iter(await admin.topics(names=[name])), None)


async def _find_group(admin: BrokerAdminApi, name: str) -> models.Group | None:
    """The broker's group ``name`` (or None): one by-name read, not a list of every group."""
    return next(iter(await admin.groups(names=[name])), None)


async def sync_topic(admins: Admins, spec: TopicSpec) -> list[TopicOutcome]:
    """Per broker: ``info`` and the topic by name (2 admin calls, each O(1) on the broker);
    a write adds ``put_topic`` and one read back."""
    desired = spec.admin_topic()

    async def one(name: str, admin: BrokerAdminApi) -> TopicOutcome:
        try:
            epoch = (await admin.info()).config_epoch
            observed = await _find_topic(admin, desired.name)
            action = brokerconfig.topic_action(desired, observed)
            wrote = False
            if action is brokerconfig.TopicAction.CANNOT_SHRINK and observed is not None:
                return TopicOutcome(
                    name,
                    synced=False,
                    config_epoch=epoch,
                    queues=observed.write_queue_nums,
                    perm=observed.perm.value,
                    error=f"the broker has {observed.write_queue_nums} queues, the spec "
                    f"{desired.write_queue_nums}; queues never shrink (raise spec.queues)",
                )
            if action is brokerconfig.TopicAction.PUT:
                await admin.put_topic(desired)
                wrote = True
                observed = await _find_topic(admin, desired.name)
        except admin_errors.AdminError as exc:
            return _failed(TopicOutcome, name, exc)
        return TopicOutcome(
            name,
            synced=brokerconfig.topic_matches(desired, observed),
            config_epoch=epoch,
            queues=observed.write_queue_nums if observed else None,
            perm=observed.perm.value if observed else "",
            wrote=wrote,
        )

    return await _each(admins, one)


async def delete_topic(admins: Admins, name: str) -> dict[str, str]:
    """Per broker name: "" once the topic is gone (already gone counts), else the error."""
    return await _delete_each(admins, lambda admin: admin.delete_topic(name))


async def _delete_each(
    admins: Admins, delete: Callable[[BrokerAdminApi], Awaitable[object]]
) -> dict[str, str]:
    async def one(_: str, admin: BrokerAdminApi) -> str:
        try:
            await delete(admin)
        except admin_errors.NotFound:
            pass
        except admin_errors.AdminError as exc:
            return str(exc)
        return ""

    return dict(zip(sorted(admins), await _each(admins, one), strict=True))


# ---------------------------------------------------------------- groups and modes


async def _sync_modes(
    admin: BrokerAdminApi, spec: GroupSpec
) -> tuple[list[models.ConsumeModeSetting], list[str], bool]:
    """Modes read back per subscribed topic, the topics the broker lacks, whether we wrote.

    Per topic: one ``consume_mode`` read (O(1) on the broker); a differing mode costs a
    ``set_consume_mode`` and a read back.
    """
    settings, missing, wrote = [], [], False
    for topic in spec.topics:
        try:
            setting = await admin.consume_mode(spec.group_name, topic)
            if not brokerconfig.mode_matches(spec, setting):
                await admin.set_consume_mode(
                    spec.group_name,
                    topic,
                    mode=spec.consume_mode,
                    pop_share_queue_num=spec.pop_share_queue_num,
                )
                wrote = True
                setting = await admin.consume_mode(spec.group_name, topic)
        except admin_errors.NotFound as exc:
            if exc.reason != "UNKNOWN_TOPIC":
                raise
            missing.append(topic)
            continue
        settings.append(setting)
    return settings, missing, wrote


async def sync_group(admins: Admins, spec: GroupSpec) -> list[GroupOutcome]:
    """Per broker: ``info``, the group by name, one mode read per subscribed topic.

    A converged group with T topics costs 2 + T admin calls per broker, each O(1) on the
    broker; a write adds ``put_group`` + one read back, and two calls per differing mode.
    """
    desired = spec.admin_group()

    async def one(name: str, admin: BrokerAdminApi) -> GroupOutcome:
        try:
            epoch = (await admin.info()).config_epoch
            observed = await _find_group(admin, desired.name)
            wrote = False
            if not brokerconfig.group_matches(desired, observed):
                await admin.put_group(desired)
                wrote = True
                observed = await _find_group(admin, desired.name)
            settings, missing, wrote_modes = await _sync_modes(admin, spec)
        except admin_errors.AdminError as exc:
            return _failed(GroupOutcome, name, exc)
        modes = {(s.mode.value, s.pop_share_queue_num) for s in settings}
        mode, share = modes.pop() if len(modes) == 1 else ("MIXED" if modes else "", None)
        synced = (
            brokerconfig.group_matches(desired, observed)
            and not missing
            and all(brokerconfig.mode_matches(spec, s) for s in settings)
        )
        return GroupOutcome(
            name,
            synced=synced,
            config_epoch=epoch,
            mode=mode,
            pop_share_queue_num=share,
            missing_topics=tuple(missing),
            wrote=wrote or wrote_modes,
        )

    return await _each(admins, one)


async def delete_group(admins: Admins, name: str) -> dict[str, str]:
    """Per broker name: "" once the group is gone (already gone counts), else the error."""
    return await _delete_each(admins, lambda admin: admin.delete_group(name))


# ---------------------------------------------------------------- backlog


def _backlog(offsets: models.GroupOffsets, topics: Sequence[str] = ()) -> int:
    return sum(
        q.unconsumed_messages + (q.in_flight_messages or 0)
        for q in offsets.queues
        if not topics or q.topic in topics or q.retry_of in topics
    )


async def group_backlog(
    admin: BrokerAdminApi, group: str, topics: Sequence[str] = ()
) -> int | None:
    """Messages ``group`` has still to consume on this broker (None: could not tell).

    Only ``topics`` count (every topic of the group when empty). The broker is asked for the
    group's own topics (offsets committed or a consume mode set) and the rows are filtered
    here: naming a topic the group never consumed would count all its messages as lag.
    """
    try:
        return _backlog(await admin.offsets(group), topics)
    except admin_errors.NotFound:
        return 0
    except admin_errors.AdminError:
        return None


async def broker_backlog(admin: BrokerAdminApi, *, topic: str | None = None) -> int | None:
    """Backlog of every group on the broker (of one topic, when given); None if unknown."""
    try:
        groups = [g.name for g in await admin.groups()]
    except admin_errors.AdminError:
        return None
    total = 0
    for group in groups:
        found = await group_backlog(admin, group, (topic,) if topic else ())
        if found is None:
            return None
        total += found
    return total


async def backlogs(
    admins: Admins, measure: Callable[[BrokerAdminApi], Awaitable[int | None]]
) -> dict[str, int | None]:
    async def one(_: str, admin: BrokerAdminApi) -> int | None:
        return await measure(admin)

    return dict(zip(sorted(admins), await _each(admins, one), strict=True))
