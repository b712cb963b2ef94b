"""Topic: created, read back and kept on every broker of its cluster.

The steps are ``fanning``'s, the kopf wiring ``registration``'s; this module says what is
Topic-specific: the spec parser, the sync, the backlog that makes a ``Delete`` wait (every
group's, on this topic) and the delete call. Importing it registers the handlers.
"""

from __future__ import annotations

from popfleet_api.client import BrokerAdminApi
from popfleet_operator.clients import fanout
from popfleet_operator.handlers import fanning, registration
from popfleet_operator.model import specs


async def _backlog(admin: BrokerAdminApi, spec: specs.TopicSpec) -> int | None:
    return await fanout.broker_backlog(admin, topic=spec.topic_name)


TOPICS = registration.Declared(
    kind=fanning.TOPIC,
    plural="topics",
    index_id="topic_claims",
    parse=specs.parse_topic,
    broker_name=lambda spec: spec.topic_name,
    sync=fanout.sync_topic,
    backlog=_backlog,
    delete=fanout.delete_topic,
)
registration.register(TOPICS)
