"""The cluster's settings as a ConfigMap (``broker.json``): a rollout trigger and a record.

What it is for: its content hash goes on the pod template (``popfleet.io/config-hash``), so
a change of any setting in it rolls the pods; and ``kubectl get configmap NAME-config``
shows the settings the pods were made from. It is mounted read-only at ``/etc/popfleet`` in
every role container, but **no broker role reads it**: the roles take what they act on as
flags (``statefulsets``: cluster name, flush mode, revive queues, POP tuning; the ports are
fixed), and those flags are on the pod template themselves. ``queueDefaults`` is the one
entry that reaches no role and no Topic (Topics take ``spec.queues``): changing it only
rolls the pods.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from popfleet_operator.builders import meta
from popfleet_operator.model import names
from popfleet_operator.model.specs import ClusterSpec, ObjectRef

KEY = "broker.json"


def settings(owner: ObjectRef, spec: ClusterSpec) -> dict[str, Any]:
    return {
        "cluster": owner.name,
        "flushMode": spec.flush_mode.value,
        "reviveQueueNum": spec.revive_queue_num,
        "queueDefaults": {
            "readQueueNums": spec.read_queue_nums,
            "writeQueueNums": spec.write_queue_nums,
        },
        "pop": {
            "ckStayBufferTimeMs": spec.pop.ck_stay_buffer_time_ms,
            "ckMaxBufferSize": spec.pop.ck_max_buffer_size,
            "longPollingMaxRequests": spec.pop.long_polling_max_requests,
        },
        "ports": {"client": names.CLIENT_PORT, "admin": names.ADMIN_PORT},
    }


def build(owner: ObjectRef, spec: ClusterSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta.object_meta(owner, names.configmap(owner.name)),
        "data": {KEY: json.dumps(settings(owner, spec), indent=2, sort_keys=True) + "\n"},
    }


def content_hash(configmap: dict[str, Any]) -> str:
    data = json.dumps(configmap["data"], sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()[:16]
