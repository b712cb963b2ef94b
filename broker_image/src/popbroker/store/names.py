"""Topic and group names, and the reserved names of system topics.

User-visible names follow RocketMQ's validator: ``^[%a-zA-Z0-9_-]{1,127}$``.
System topics are ordinary topics with reserved names (DESIGN §3.1):

* revive log ``rmq_sys_REVIVE_LOG_<cluster>`` (``revive_queue_num`` queues);
* retry ``%RETRY%<group>+<topic>`` -- the v2 form; ``+`` is illegal in user names,
  so a retry name always parses back to exactly one (group, topic) (upstream #7543);
* dead letter ``%DLQ%<group>``.
"""

from __future__ import annotations

import functools
import re

from popbroker.store.errors import InvalidName

NAME_PATTERN = re.compile(r"[%a-zA-Z0-9_-]{1,127}")
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
REVIVE_LOG_PREFIX = "rmq_sys_REVIVE_LOG_"
SYSTEM_PREFIX = "rmq_sys_"
# The revive role's progress is the committed offset of this group on each revive queue.
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"


def validate_name(name: str, *, kind: str) -> str:
    """Return ``name`` if it is a legal user topic/group name, else raise ``InvalidName``."""
    if name.startswith((RETRY_PREFIX, DLQ_PREFIX, SYSTEM_PREFIX)):
        raise InvalidName(f"{kind} name {name!r} uses a reserved system prefix")
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidName(f"{kind} name {name!r} must match ^[%a-zA-Z0-9_-]{{1,127}}$")
    return name


def revive_topic(cluster: str) -> str:
    return f"{REVIVE_LOG_PREFIX}{cluster}"


def retry_topic(group: str, topic: str) -> str:
    return f"{RETRY_PREFIX}{group}+{topic}"


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"


def parse_retry_topic(name: str) -> tuple[str, str] | None:
    """``(group, topic)`` of a v2 retry topic name, or None if ``name`` is not one."""
    if not name.startswith(RETRY_PREFIX):
        return None
    group, plus, topic = name[len(RETRY_PREFIX) :].partition("+")
    if not plus or not group or not topic:
        return None
    return group, topic


def is_system_topic(name: str) -> bool:
    return name.startswith((RETRY_PREFIX, DLQ_PREFIX, SYSTEM_PREFIX))


@functools.lru_cache(maxsize=4096)  # checked per appended record; a refusal is not cached
def validate_topic_for_append(name: str) -> str:
    """Names the store accepts for records: user names plus well-formed system names."""
    if name.startswith(REVIVE_LOG_PREFIX) and len(name) > len(REVIVE_LOG_PREFIX):
        return name
    if name.startswith(DLQ_PREFIX):
        validate_name(name[len(DLQ_PREFIX) :], kind="group")
        return name
    parsed = parse_retry_topic(name)
    if parsed is not None:
        validate_name(parsed[0], kind="group")
        validate_name(parsed[1], kind="topic")
        return name
    return validate_name(name, kind="topic")
