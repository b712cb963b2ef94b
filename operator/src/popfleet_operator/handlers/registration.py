"""kopf wiring shared by the kinds that fan out to every broker (Topic, ConsumerGroup).

:func:`register` gives a kind, from one :class:`Declared` description:

* a claim index (``<index_id>``): (namespace, cluster, broker-side name) -> claims, for
  ``fanning``'s oldest-wins conflict rule;
* change handlers (resume, create, update) and the resync timer, all running
  ``fanning.run`` (the timer with ``retry=None``: it never raises);
* the finalizer's delete handler, running ``fanning.release`` with the kind's backlog
  measure and delete call.

Handler ids are given explicitly (``changed``, ``resync``, ``deleted``, the index id) so
that kopf's progress annotations keep their names whatever the Python qualname.
Callers: ``topics`` and ``groups`` (importing them registers the handlers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import kopf

from popfleet_api.client import BrokerAdminApi
from popfleet_operator import errors
from popfleet_operator.clients import fanout
from popfleet_operator.handlers import fanning, runtime
from popfleet_operator.model import names
from popfleet_operator.model.observations import BrokerOutcome


class FannedSpec(Protocol):
    """What the shared steps need of a parsed Topic or ConsumerGroup spec."""

    @property
    def cluster(self) -> str: ...

    @property
    def delete_on_broker(self) -> bool: ...


SpecT = TypeVar("SpecT", bound=FannedSpec)


@dataclass(frozen=True, slots=True)
class Declared(Generic[SpecT]):
    """One fanned-out kind: how to parse it, sync it, measure its backlog and delete it."""

    kind: fanning.Kind
    plural: str
    index_id: str
    parse: Callable[[str, Mapping[str, Any]], SpecT]  # (CR name, spec) or InvalidSpec
    broker_name: Callable[[SpecT], str]
    sync: Callable[[fanout.Admins, SpecT], Awaitable[list[BrokerOutcome]]]
    backlog: Callable[[BrokerAdminApi, SpecT], Awaitable[int | None]]
    delete: Callable[[fanout.Admins, str], Awaitable[dict[str, str]]]


def _parser(declared: Declared[SpecT], body: kopf.Body) -> Callable[[], Any]:
    def parse() -> tuple[str, str, fanning.Sync]:
        spec = declared.parse(body["metadata"]["name"], body["spec"])

        async def sync(admins: fanout.Admins) -> list[BrokerOutcome]:
            return await declared.sync(admins, spec)

        return spec.cluster, declared.broker_name(spec), sync

    return parse


def register(declared: Declared[SpecT]) -> None:
    """Register the index and the handlers of ``declared`` with kopf (see the docstring)."""
    resource = (names.GROUP, names.VERSION, declared.plural)

    @kopf.index(*resource, id=declared.index_id)
    def claims(
        *, namespace: str | None, name: str, spec: kopf.Spec, meta: kopf.Meta, **_: Any
    ) -> dict[tuple[str, str, str], Any]:
        broker_name = str(spec.get(declared.kind.name_field) or name)
        cluster = str((spec.get("clusterRef") or {}).get("name", ""))
        return {fanning.claim_key(namespace or "", cluster, broker_name): fanning.claim_of(meta)}

    async def one_round(
        body: kopf.Body, patch: kopf.Patch, *, memo: Any, logger: kopf.Logger,
        retry: int | None, kwargs: Mapping[str, Any],
    ) -> None:  # fmt: skip
        await fanning.run(
            declared.kind,
            body=body,
            patch=patch,
            memo=memo,
            logger=logger,
            retry=retry,
            index=kwargs[declared.index_id],
            parse=_parser(declared, body),
        )

    @kopf.on.resume(*resource, id="changed")
    @kopf.on.create(*resource, id="changed")
    @kopf.on.update(*resource, id="changed")
    async def changed(
        *, body: kopf.Body, patch: kopf.Patch, memo: Any, logger: kopf.Logger, retry: int,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        await one_round(body, patch, memo=memo, logger=logger, retry=retry, kwargs=kwargs)

    @kopf.timer(*resource, id="resync", interval=runtime.RESYNC_S)
    async def resync(
        *, body: kopf.Body, patch: kopf.Patch, memo: Any, logger: kopf.Logger, **kwargs: Any
    ) -> None:
        await one_round(body, patch, memo=memo, logger=logger, retry=None, kwargs=kwargs)

    @kopf.on.delete(*resource, id="deleted")
    async def deleted(*, body: kopf.Body, patch: kopf.Patch, memo: Any, **kwargs: Any) -> None:
        try:
            spec = declared.parse(body["metadata"]["name"], body["spec"])
        except errors.InvalidSpec:
            return  # never reached the brokers

        async def backlog(admins: fanout.Admins) -> dict[str, int | None]:
            return await fanout.backlogs(admins, lambda admin: declared.backlog(admin, spec))

        async def delete(admins: fanout.Admins) -> dict[str, str]:
            return await declared.delete(admins, declared.broker_name(spec))

        await fanning.release(
            declared.kind,
            body=body,
            patch=patch,
            memo=memo,
            index=kwargs[declared.index_id],
            cluster=spec.cluster,
            broker_name=declared.broker_name(spec),
            delete_on_broker=spec.delete_on_broker,
            backlog=backlog,
            delete=delete,
        )
