"""Cases for popfront's append encoder (`append.go`), answered by the Python reference.

``broker_image/front/testdata/appends.json`` holds, for each case, a serialized v2
``Message``, the unplaced record the reference stores for it (``convert.outgoing_message``
-> ``messages.to_store_properties`` -> ``appending.encode_unplaced``, queue 0) and the
reference's refusal, if any (``Sender``'s checks, default settings, a writable MIXED
topic). ``go test`` checks that popfront's ``A`` items carry an equal record and only for
messages the reference accepts. Regenerate (from the repository's root)::

    .venv/bin/python -m tests.unit.services.front_appends \\
        > broker_image/front/testdata/appends.json
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any

from popbroker.grpc import convert
from popbroker.grpc.protocol import definition
from popbroker.services import messages
from popbroker.services.sending import Sender
from popbroker.services.settings import PopackSettings
from popbroker.store import appending
from popbroker.store.api import MessageToAppend, MessageType, TopicConfig

CASES = 160
TOPIC = TopicConfig("orders", 8, 8, message_type=MessageType.MIXED)


def _message(rng: random.Random) -> Any:
    message = definition.Message()
    message.topic.name = "orders" if rng.random() < 0.95 else rng.choice(["", "x" * 300])
    message.body = rng.choice([b"\x00\xff" * 3, rng.randbytes(200)]) if rng.random() < 0.95 else b""
    system = message.system_properties
    system.message_id = (
        f"{rng.getrandbits(128):032X}" if rng.random() < 0.9 else rng.choice(["", "  ", "id\x01"])
    )
    system.message_type = rng.choice(
        [definition.NORMAL, definition.NORMAL, definition.FIFO, definition.DELAY]
    )
    if rng.random() < 0.6:
        system.tag = (
            rng.choice(["TagA", "标签"])
            if rng.random() < 0.8
            else rng.choice(["", " ", "a|b", "t" * 129])
        )
    for _ in range(rng.randint(0, 3)):
        system.keys.append(
            rng.choice(["k1", "ключ"])
            if rng.random() < 0.8
            else rng.choice(["", "a b", "\x1c", "\u3000"])
        )
    if rng.random() < 0.5:
        system.message_group = rng.choice(["g1", "grupo-é"]) if rng.random() < 0.9 else ""
    if rng.random() < 0.2:
        system.delivery_timestamp.seconds = 1_700_000_100
    if rng.random() < 0.8:
        system.born_timestamp.seconds = rng.choice([1_700_000_000, 0])
        system.born_timestamp.nanos = rng.choice([0, 123_000_000, 999_999_999])
    system.born_host = rng.choice(["10.0.0.1", ""]) if rng.random() < 0.95 else "h" * 256
    for index in range(rng.randint(0, 4)):
        key = f"user-{index}" if rng.random() < 0.85 else rng.choice(["UNIQ_KEY", "", "k\x02"])
        message.user_properties[key] = (
            rng.choice(["", "v", "valor ü"]) if rng.random() < 0.9 else "x\x01"
        )
    return message


def _case(rng: random.Random) -> dict[str, Any]:
    message = _message(rng)
    sender = Sender(store=None, config=None, settings=PopackSettings(), clock=lambda: 0)  # type: ignore[arg-type]
    record = b""
    try:
        outgoing = convert.outgoing_message(message)
        sender._validate(TOPIC, outgoing)
        record = appending.encode_unplaced(
            MessageToAppend(
                topic=outgoing.topic,
                queue_id=0,
                body=outgoing.body,
                properties=messages.to_store_properties(outgoing),
                born_timestamp_ms=outgoing.born_timestamp_ms,
                born_host=outgoing.born_host,
            )
        )
        error = ""
    except Exception as exc:  # noqa: BLE001 - a refusal is a case's answer
        error = f"{type(exc).__name__}: {exc}"
    return {
        "message": base64.b64encode(message.SerializeToString(deterministic=True)).decode(),
        "record": base64.b64encode(record).decode(),
        "error": error,
    }


def cases(seed: int = 17) -> dict[str, Any]:
    rng = random.Random(seed)
    return {"cases": [_case(rng) for _ in range(CASES)]}


if __name__ == "__main__":
    print(json.dumps(cases(), indent=1))
