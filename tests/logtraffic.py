"""Random appends for the replication tests: batches of 1..``most`` messages of random
sizes on random topics and queues 0-1, each with a unique ``UNIQ_KEY``."""

from __future__ import annotations

import random
from collections.abc import Sequence

from popbroker.store.api import MessageToAppend, TopicConfig
from popbroker.store.local import LocalStore


async def random_appends(
    store: LocalStore,
    rng: random.Random,
    batches: int,
    *,
    label: str,
    topics: Sequence[TopicConfig],
    most: int = 5,
) -> None:
    for batch in range(batches):
        await store.append(
            [
                MessageToAppend(
                    topic=rng.choice(topics).name,
                    queue_id=rng.randrange(2),
                    body=rng.randbytes(rng.randint(100, 1500)),
                    properties={"UNIQ_KEY": f"{label}-{batch}-{i}"},
                )
                for i in range(rng.randint(1, most))
            ]
        )
