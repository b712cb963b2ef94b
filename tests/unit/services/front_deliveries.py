"""Cases for popfront's delivery builder, answered by the Python reference.

``broker_image/front/testdata/deliveries.json`` holds, for each case, the ``D`` item
popack sends (:func:`popbroker.grpc.front.encode_delivery`) and the serialized
``ReceiveMessageResponse`` that :func:`popbroker.grpc.convert.delivered_message`
builds for the same delivery; ``go test`` in ``broker_image/front`` checks that
popfront builds an equal message from every item, and
``test_front_deliveries.py`` that the file is what the reference answers today.
Regenerate after a change to either side (from the repository's root)::

    .venv/bin/python -m tests.unit.services.front_deliveries \
        > broker_image/front/testdata/deliveries.json
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

from popbroker.grpc import convert
from popbroker.grpc.front import FrontDelivery, encode_delivery
from popbroker.grpc.protocol import service
from popbroker.services import messages
from popbroker.services.messages import DeliveredMessage
from popbroker.store.api import StoredMessage
from tests.unit.store.records import with_record

FIXTURE = Path(__file__).resolve().parents[3] / "broker_image/front/testdata/deliveries.json"
CASES = 64


def _properties(rng: random.Random) -> dict[str, str]:
    props: dict[str, str] = {}
    if rng.random() < 0.8:
        props["UNIQ_KEY"] = f"{rng.getrandbits(128):032X}"
    if rng.random() < 0.6:
        props["TAGS"] = rng.choice(["", "TagA", "etiqueta-ñ", "标签"])
    if rng.random() < 0.5:
        props["KEYS"] = rng.choice(["", "k1", "k1 k2", " a  b ", "ключ"])
    if rng.random() < 0.3:
        props[messages.PROPERTY_MESSAGE_GROUP] = rng.choice(["", "g1", "grupo-é"])
    if rng.random() < 0.3:
        props[messages.PROPERTY_DELIVER_MS] = rng.choice(
            ["1700000001234", "0", "12a", "", "\u0661\u0662", str(rng.getrandbits(40))]
        )
    for key in rng.sample(sorted(messages.RESERVED_PROPERTY_KEYS), k=rng.randint(0, 3)):
        props.setdefault(key, "reserved")
    for index in range(rng.randint(0, 4)):
        props[f"user-{index}"] = rng.choice(["", "v", "valor ü", "x" * 40])
    return props


def _case(rng: random.Random) -> dict[str, Any]:
    body = rng.choice([b"", b"\x00\xff" * 3, rng.randbytes(200), rng.randbytes(1024)])
    physical = rng.choice([0, rng.getrandbits(20), rng.getrandbits(40)])
    born_ms = rng.choice([1_700_000_000_123, 1_700_000_000_000, 0, -1_500])
    props = _properties(rng)
    topic = rng.choice(["orders", "%RETRY%billing", "tópico"])
    host = rng.choice(["127.0.0.1:5555", "", "10.1.2.3:40000"])
    stored = with_record(
        StoredMessage(
            topic=topic,
            queue_id=rng.randint(0, 15),
            queue_offset=rng.choice([0, rng.getrandbits(30)]),
            physical_offset=physical,
            body=body,
            properties=props,
            born_timestamp_ms=born_ms,
            flags=rng.getrandbits(16),
            store_timestamp_ms=born_ms + rng.randint(0, 5000),
            born_host=host,
            reconsume_times=rng.randint(0, 16),
        )
    )
    delivered = DeliveredMessage(
        topic=rng.choice(["orders", "tópico"]),
        stored=stored,
        receipt_handle=rng.choice(["", "handle-" + "x" * rng.randint(1, 200)]),
        delivery_attempt=rng.randint(1, 17),
        invisible_ms=rng.choice([0, 1, 1500, 60_000, 43_200_000]),
    )
    namespace = rng.choice(["", "ns-1"])
    store_host = rng.choice(["127.0.0.1:8081", "broker-0.popfleet:8081"])
    item = encode_delivery(FrontDelivery(delivered, namespace, store_host))
    try:
        message = convert.delivered_message(delivered, namespace=namespace, store_host=store_host)
        want = base64.b64encode(
            service.ReceiveMessageResponse(message=message).SerializeToString(deterministic=True)
        )
        expected: dict[str, Any] = {"response": want.decode()}
    except ValueError as exc:  # e.g. a delivery time beyond int64: the call fails
        expected = {"error": type(exc).__name__}
    return {"item": base64.b64encode(item).decode(), **expected}


def fixture() -> dict[str, Any]:
    rng = random.Random(20261128)
    return {
        "reserved_properties": sorted(messages.RESERVED_PROPERTY_KEYS),
        "cases": [_case(rng) for _ in range(CASES)],
    }


def render() -> str:
    return json.dumps(fixture(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render(), end="")
