"""ConsumerGroup: the group and its consume mode per subscribed topic on every broker.

Editing ``consumeMode``/``popShareQueueNum`` switches every broker; the status shows each
broker's mode as read back. The steps are ``fanning``'s; this module says what is
group-specific (the spec parser, the sync, the ``status.brokers`` entry, the backlog that
makes a ``Delete`` wait: this group's, on its topics; the delete call) and declares the kopf
handlers. Handler ids are explicit (``changed``, ``resync``, ``deleted``, ``group_claims``)
so that kopf's progress annotations keep their names whatever the function names. Importing
the module registers them.
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


async def _backlog(admin: BrokerAdminApi, spec: specs.GroupSpec) -> int | None:
    return await fanout.group_backlog(admin, spec.group_name, spec.topics)


def _broker_name(spec: specs.GroupSpec) -> str:
    return spec.group_name


GROUPS = fanning.Declared(
    kind="ConsumerGroup",
    plural="consumergroups",
    domain=c.MODE_APPLIED,
    name_field="groupName",
    parse=specs.parse_group,
    broker_name=_broker_name,
    sync=fanout.sync_group,
    entry=fanout_status.group_entry,
    backlog=_backlog,
    delete=fanout.delete_group,
)


@kopf.index(*GROUPS.resource, id="group_claims")
def group_claims(
    *, namespace: str | None, name: str, spec: kopf.Spec, meta: kopf.Meta, **_: Any
) -> dict[tuple[str, str, str], conflicts.Claim]:
    return fanning.claims(GROUPS, namespace=namespace, name=name, spec=spec, meta=meta)


@kopf.on.resume(*GROUPS.resource, id="changed")
@kopf.on.create(*GROUPS.resource, id="changed")
@kopf.on.update(*GROUPS.resource, id="changed")
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
        GROUPS,
        body=body,
        patch=patch,
        memo=memo,
        logger=logger,
        retry=retry,
        index=kwargs["group_claims"],
    )


@kopf.timer(
    *GROUPS.resource, id="resync", interval=runtime.RESYNC_S, initial_delay=runtime.RESYNC_S
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
        GROUPS,
        body=body,
        patch=patch,
        memo=memo,
        logger=logger,
        retry=None,
        index=kwargs["group_claims"],
    )


@kopf.on.delete(*GROUPS.resource, id="deleted")
async def deleted(*, body: kopf.Body, patch: kopf.Patch, memo: Any, **kwargs: Any) -> None:
    await fanning.release(GROUPS, body=body, patch=patch, memo=memo, index=kwargs["group_claims"])
