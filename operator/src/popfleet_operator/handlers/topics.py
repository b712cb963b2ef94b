"""Topic: created, read back and kept on every broker of its cluster (see ``fanning``)."""

from __future__ import annotations

from typing import Any

import kopf

from popfleet_operator import errors
from popfleet_operator.clients import fanout
from popfleet_operator.handlers import fanning, runtime
from popfleet_operator.model import names, specs


@kopf.index(names.GROUP, names.VERSION, "topics")
def topic_claims(
    *, namespace: str | None, name: str, spec: kopf.Spec, meta: kopf.Meta, **_: Any
) -> dict[tuple[str, str, str], Any]:
    broker_name = str(spec.get("topicName") or name)
    cluster = str((spec.get("clusterRef") or {}).get("name", ""))
    return {fanning.claim_key(namespace or "", cluster, broker_name): fanning.claim_of(meta)}


def _parser(body: kopf.Body) -> Any:
    def parse() -> tuple[str, str, fanning.Sync]:
        spec = specs.parse_topic(body["metadata"]["name"], body["spec"])

        async def sync(admins: fanout.Admins) -> Any:
            return await fanout.sync_topic(admins, spec)

        return spec.cluster, spec.topic_name, sync

    return parse


@kopf.on.resume(names.GROUP, names.VERSION, "topics")
@kopf.on.create(names.GROUP, names.VERSION, "topics")
@kopf.on.update(names.GROUP, names.VERSION, "topics")
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
        fanning.TOPIC,
        body=body,
        patch=patch,
        memo=memo,
        logger=logger,
        retry=retry,
        index=kwargs["topic_claims"],
        parse=_parser(body),
    )


@kopf.timer(names.GROUP, names.VERSION, "topics", interval=runtime.RESYNC_S)
async def resync(
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    await fanning.run(
        fanning.TOPIC,
        body=body,
        patch=patch,
        memo=memo,
        logger=logger,
        retry=None,
        index=kwargs["topic_claims"],
        parse=_parser(body),
    )


@kopf.on.delete(names.GROUP, names.VERSION, "topics")
async def deleted(
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    **kwargs: Any,
) -> None:
    try:
        spec = specs.parse_topic(body["metadata"]["name"], body["spec"])
    except errors.InvalidSpec:
        return  # never reached the brokers

    async def backlog(admins: fanout.Admins) -> dict[str, int | None]:
        return await fanout.backlogs(
            admins, lambda admin: fanout.broker_backlog(admin, topic=spec.topic_name)
        )

    async def delete(admins: fanout.Admins) -> dict[str, str]:
        return await fanout.delete_topic(admins, spec.topic_name)

    await fanning.release(
        fanning.TOPIC,
        body=body,
        patch=patch,
        memo=memo,
        index=kwargs["topic_claims"],
        cluster=spec.cluster,
        broker_name=spec.topic_name,
        delete_on_broker=spec.delete_on_broker,
        backlog=backlog,
        delete=delete,
    )
