"""Topic: created, read back and kept on every broker of its cluster.

The steps are ``fanning``'s; this module says what is Topic-specific (the spec parser, the
sync, the ``status.brokers`` entry, the backlog that makes a ``Delete`` wait: every group's,
on this topic; the delete call) and declares the kopf handlers. Handler ids are explicit
(``changed``, ``resync``, ``deleted``, ``topic_claims``) so that kopf's progress annotations
keep their names whatever the function names. Importing the module registers them.
"""

from __future__ import annotations

from typing import Any

import kopf

from popfleet_api.client import BrokerAdminApi
from popfleet_operator.clients import fanout
from popfleet_operator.handlers import fanning, runtime
from popfleet_operator.model import specs
from popfleet_operator.planning import conflicts
from popfleet_operator.status import conditions as c
from popfleet_operator.status import fanout as fanout_status


async def _backlog(admin: BrokerAdminApi, spec: specs.TopicSpec) -> int | None:
    return await fanout.broker_backlog(admin, topic=spec.topic_name)


def _broker_name(spec: specs.TopicSpec) -> str:
    return spec.topic_name


TOPICS = fanning.Declared(
    kind="Topic",
    plural="topics",
    domain=c.TOPIC_SYNCED,
    name_field="topicName",
    parse=specs.parse_topic,
    broker_name=_broker_name,
    sync=fanout.sync_topic,
    entry=fanout_status.topic_entry,
    backlog=_backlog,
    delete=fanout.delete_topic,
)


@kopf.index(*TOPICS.resource, id="topic_claims")
def topic_claims(
    *, namespace: str | None, name: str, spec: kopf.Spec, meta: kopf.Meta, **_: Any
) -> dict[tuple[str, str, str], conflicts.Claim]:
    return fanning.claims(TOPICS, namespace=namespace, name=name, spec=spec, meta=meta)


@kopf.on.resume(*TOPICS.resource, id="changed")
@kopf.on.create(*TOPICS.resource, id="changed")
@kopf.on.update(*TOPICS.resource, id="changed")
async def changed(
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    logger: kopf.Logger,
    retry: int,
    **kwargs: Any,
) -> None:
    await fanning.run(
        TOPICS,
        body=body,
        patch=patch,
        memo=memo,
        logger=logger,
        retry=retry,
        index=kwargs["topic_claims"],
    )


@kopf.timer(
    *TOPICS.resource, id="resync", interval=runtime.RESYNC_S, initial_delay=runtime.RESYNC_S
)
async def resync(
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    await fanning.run(
        TOPICS,
        body=body,
        patch=patch,
        memo=memo,
        logger=logger,
        retry=None,
        index=kwargs["topic_claims"],
    )


@kopf.on.delete(*TOPICS.resource, id="deleted")
async def deleted(*, body: kopf.Body, patch: kopf.Patch, memo: Any, **kwargs: Any) -> None:
    await fanning.release(TOPICS, body=body, patch=patch, memo=memo, index=kwargs["topic_claims"])
