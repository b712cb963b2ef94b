"""ConsumerGroup: the group and its consume mode per subscribed topic on every broker.

Editing ``consumeMode``/``popShareQueueNum`` switches every broker; the status shows each
broker's mode as read back. The steps are ``fanning``'s, the kopf wiring
``registration``'s; this module says what is group-specific: the spec parser, the sync, the
backlog that makes a ``Delete`` wait (this group's, on its topics) and the delete call.
Importing it registers the handlers.
"""

from __future__ import annotations

from popfleet_api.client import BrokerAdminApi
from popfleet_operator.clients import fanout
from popfleet_operator.handlers import fanning, registration
from popfleet_operator.model import specs


async def _backlog(admin: BrokerAdminApi, spec: specs.GroupSpec) -> int | None:
    return await fanout.group_backlog(admin, spec.group_name, spec.topics)


GROUPS = registration.Declared(
    kind=fanning.GROUP,
    plural="consumergroups",
    index_id="group_claims",
    parse=specs.parse_group,
    broker_name=lambda spec: spec.group_name,
    sync=fanout.sync_group,
    backlog=_backlog,
    delete=fanout.delete_group,
)
registration.register(GROUPS)
