"""Which lane a Topic's or ConsumerGroup's round waits in for one of the round slots.

``runtime.ROUND_LIMIT`` rounds talk to brokers at once; the others wait. With one queue, a
user's edit (say a PULL -> POP switch) applied while a thousand new objects are being
created waits behind all of them, then again behind whatever queued meanwhile: seconds of
latency for the one change somebody is watching. Rounds therefore wait in three lanes,
served in order (arrival order within a lane):

1. ``EDIT``: a spec edited after creation (generation above 1) that the status has not
   confirmed yet: a person or a pipeline is waiting for it;
2. ``NEW``: an object never confirmed (its first rounds);
3. ``BACKGROUND``: everything else: resync ticks, and the rounds kopf runs again for
   objects already confirmed for their generation (an operator restart resumes them all).

Pure: the caller (``handlers.fanning``) passes whether the round is a tick, the object's
generation and its status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EDIT, NEW, BACKGROUND = 0, 1, 2


def lane(*, tick: bool, generation: int, status: Mapping[str, Any]) -> int:
    """The lane of one round (lower is served first)."""
    observed = status.get("observedGeneration")
    if tick or observed == generation:
        return BACKGROUND
    if generation > 1:
        return EDIT
    return NEW
