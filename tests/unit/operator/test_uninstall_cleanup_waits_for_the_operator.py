"""The uninstall hook (``popfleet_operator.uninstalling``) against an in-memory apiserver.

The fake plays the operator too: an object DELETEd gets a deletionTimestamp and disappears
at the next listing unless the test holds it (a finalizer the operator does not remove yet).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from popfleet_operator import uninstalling
from popfleet_operator.errors import KubeError

Obj = dict[str, Any]
BASE = "/apis/popfleet.io/v1alpha1"


def cr(namespace: str, name: str, *, ready: Obj | None = None) -> Obj:
    obj: Obj = {
        "metadata": {"namespace": namespace, "name": name, "finalizers": ["popfleet.io/finalizer"]}
    }
    if ready is not None:
        obj["status"] = {"conditions": [{"type": "Ready", **ready}]}
    return obj


class FakeApi:
    """``items`` and ``request`` over {plural: [objects]}; records every DELETE."""

    def __init__(self, objects: Mapping[str, list[Obj]], *, missing_crds: bool = False) -> None:
        self.objects = {plural: list(objs) for plural, objs in objects.items()}
        self.held: set[str] = set()  # names whose finalizer the "operator" keeps
        self.deleted: list[tuple[str, str, Mapping[str, str] | None]] = []
        self.missing_crds = missing_crds

    async def items(self, url: str, *, label_selector: str = "") -> list[Obj]:
        if self.missing_crds:
            raise KubeError(f"GET {url}: 404", status=404)
        plural = url.rsplit("/", 1)[-1]
        _, _, scoped = url.partition("/namespaces/")
        namespace = scoped.split("/", maxsplit=1)[0] if scoped else None
        self.objects[plural] = [  # the operator finalizes what was deleted and not held
            o
            for o in self.objects.get(plural, [])
            if not o["metadata"].get("deletionTimestamp") or o["metadata"]["name"] in self.held
        ]
        return [
            o
            for o in self.objects[plural]
            if namespace is None or o["metadata"]["namespace"] == namespace
        ]

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: Obj | None = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        assert method == "DELETE"
        plural, name = url.split("/")[-2:]
        self.deleted.append((plural, name, query))
        for obj in self.objects[plural]:
            if obj["metadata"]["name"] == name:
                obj["metadata"]["deletionTimestamp"] = "now"
        return {}


def story() -> dict[str, list[Obj]]:
    return {
        "brokerclusters": [cr("a", "demo"), cr("b", "other")],
        "topics": [cr("a", "orders")],
        "consumergroups": [cr("a", "billing"), cr("b", "audit")],
    }


async def test_groups_and_topics_go_before_clusters_and_clusters_go_foreground() -> None:
    api = FakeApi(story())
    assert await uninstalling.clean_up(api, namespaces=[], timeout_s=5) == []
    assert [(plural, name) for plural, name, _ in api.deleted] == [
        ("consumergroups", "billing"),
        ("consumergroups", "audit"),
        ("topics", "orders"),
        ("brokerclusters", "demo"),
        ("brokerclusters", "other"),
    ]
    queries = {plural: query for plural, _, query in api.deleted}
    assert queries["brokerclusters"] == {"propagationPolicy": "Foreground"}
    assert queries["topics"] is None
    assert all(not objs for objs in api.objects.values())


async def test_only_the_watched_namespaces_are_touched() -> None:
    api = FakeApi(story())
    assert await uninstalling.clean_up(api, namespaces=["a"], timeout_s=5) == []
    assert {name for _, name, _ in api.deleted} == {"billing", "orders", "demo"}
    assert [o["metadata"]["name"] for o in api.objects["brokerclusters"]] == ["other"]


WAITS = "deletionPolicy Delete waits for the backlog to drain (demo-0: 3 messages)"


async def test_a_blocked_deletion_is_reported_and_clusters_are_left_alone() -> None:
    objects = story()
    objects["topics"] = [
        cr(
            "a",
            "orders",
            ready={
                "status": "False",
                "reason": "DeletionBlocked",
                "message": WAITS,
            },
        )
    ]
    api = FakeApi(objects)
    api.held.add("orders")
    left = await uninstalling.clean_up(api, namespaces=[], timeout_s=0)
    assert left == [
        f"Topic a/orders (finalizers: popfleet.io/finalizer; Ready=False DeletionBlocked: {WAITS})"
    ]
    assert not [d for d in api.deleted if d[0] == "brokerclusters"]
    assert len(api.objects["brokerclusters"]) == 2


async def test_no_crds_means_nothing_to_do() -> None:
    api = FakeApi({}, missing_crds=True)
    assert await uninstalling.clean_up(api, namespaces=["a"], timeout_s=0) == []
    assert api.deleted == []


@pytest.mark.parametrize(
    ("namespaces", "urls"),
    [
        ([], [f"{BASE}/topics"]),
        (["a", "b"], [f"{BASE}/namespaces/a/topics", f"{BASE}/namespaces/b/topics"]),
    ],
)
def test_collection_urls(namespaces: list[str], urls: list[str]) -> None:
    assert uninstalling.collection_urls("topics", namespaces) == urls
