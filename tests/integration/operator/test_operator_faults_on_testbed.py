"""Issue 15's faults on the testbed: every CR converges afterwards, with no manual step.

One 3-broker BrokerCluster for the module; each test applies its own fleet of 50 Topics + 50
ConsumerGroups (``faultfleet``), injects one fault, then waits until every object of the fleet
is converged with nothing stale (``faultfleet.why_not_converged``: status and conditions of
the current generation, Ready True, Degraded and Reconciling False, every broker synced), and
checks what Events and the operator log (objects named ``[namespace/name]``, as kopf names
them) say happened. Each fleet is deleted after its test so that the operator's load (the
chart is installed with a 2 s resync for these tests) stays about that of one fleet (the
deletion overlaps the next test).

1. a broker slower than the admin deadline during a resync: converged CRs never report it
   unreachable (a watch records every version of every object);
2. a broker unreachable while 100 CRs change (25 groups switch PULL -> POP, 25 Topics change
   their queue count, 25 Topics and 25 groups are created): they report it unreachable, then
   converge when it answers again;
3. the operator pod deleted while a fleet is being applied: the Deployment's next pod finishes;
4. the API server restarted while a fleet converges: the operator rides it out.

The issue asks for a broker unreachable for 2 minutes. Here the outage (SIGSTOP of the broker's
store process, which serves the admin API) lasts until every changed CR has reported that
broker unreachable: by construction longer than the operator's admin deadline plus the rounds
that observed it, which is what the 2 minutes stand for (the operator's behaviour does not
depend on the outage's length past that, only on rounds seeing the broker silent), and short
enough that the kubelet's liveness probe (6 x 10 s) never restarts the frozen container, which
would end the outage by itself.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from popfleet_testbed import cluster, controlplane, errors, waiting
from tests.integration.operator import faultfleet, story
from tests.integration.operator.faultfleet import Fleet

pytestmark = [pytest.mark.timeout(300)]

CLUSTER = "faults"
BROKERS = 3
PAIRS = 50  # Topics, and as many ConsumerGroups: 100 CRs per fleet
OPERATOR_NS = faultfleet.OPERATOR_NS
OPERATOR_SELECTOR = faultfleet.OPERATOR_SELECTOR
operator_pod = faultfleet.operator_pod


@pytest.fixture(scope="module")
def ns(popfleet_release: cluster.Cluster) -> Iterator[str]:
    name = popfleet_release.new_namespace("faults")
    popfleet_release.apply(name, story.brokers_cr(CLUSTER, BROKERS))
    story.wait_condition(
        popfleet_release, name, "brokerclusters", CLUSTER, "Ready",
        also=lambda bc: bc["status"]["readyBrokers"] == BROKERS, timeout_s=180,
    )  # fmt: skip
    yield name
    popfleet_release.delete_namespace(name)


@pytest.fixture
def fleets(popfleet_release: cluster.Cluster, ns: str) -> Iterator[list[str]]:
    """Prefixes of the fleets a test applies; each is deleted after the test, pass or fail."""
    prefixes: list[str] = []
    yield prefixes
    for prefix in prefixes:
        faultfleet.delete(popfleet_release, ns, prefix)


def apply_fleet(tb: cluster.Cluster, ns: str, fleet: Fleet, fleets: list[str]) -> None:
    if fleet.prefix not in fleets:
        fleets.append(fleet.prefix)
    tb.apply(ns, *fleet.manifests())


def broker_pod(tb: cluster.Cluster, ns: str, ordinal: int) -> dict[str, Any]:
    pods = story.broker_pods(tb, ns, CLUSTER)
    (pod,) = [p for p in pods if p["metadata"]["name"] == f"{CLUSTER}-{ordinal}"]
    return pod


def operator_log(tb: cluster.Cluster) -> str:
    return tb.log(operator_pod(tb))


def reported_trouble(plural: str, obj: dict[str, Any]) -> str | None:
    """A version of an object that says Ready=False or Degraded=True (why), else None."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        bad = (cond["type"] == "Ready" and cond["status"] == "False") or (
            cond["type"] == "Degraded" and cond["status"] == "True"
        )
        if bad:
            said = f"{cond['type']}={cond['status']} {cond.get('reason')}: {cond.get('message')}"
            return f"{plural}/{obj['metadata']['name']} {said}"
    return None


def test_a_broker_slower_than_the_deadline_is_not_reported_unreachable(
    popfleet_release: cluster.Cluster, ns: str, fleets: list[str]
) -> None:
    """Converged CRs, then the store of faults-1 silent for the admin deadline and one more
    second (each span checked by a probe with that deadline), during the 2 s resync; then it
    answers again. No version of any CR may say Ready=False or Degraded=True meanwhile."""
    tb = popfleet_release
    deadline_s = faultfleet.operator_setting(tb, "POPFLEET_ADMIN_TIMEOUT_S")
    resync_s = faultfleet.operator_setting(tb, "POPFLEET_RESYNC_INTERVAL_S")
    fleet = Fleet("slow", CLUSTER, BROKERS, PAIRS)
    log_before = len(operator_log(tb))
    apply_fleet(tb, ns, fleet, fleets)
    faultfleet.wait_converged(tb, ns, fleet, timeout_s=120)

    pod = broker_pod(tb, ns, 1)
    store = story.container_process(tb, pod, "store")
    with faultfleet.watch(tb, ns, fleet.prefix) as recorder:
        # The watch is live (else "never" would hold vacuously): it sees an annotation land.
        tb.kubectl("annotate", "topic", fleet.topic(0), "-n", ns, f"{faultfleet.LABEL}-watched=1")
        waiting.until(
            lambda: any(
                f"{faultfleet.LABEL}-watched" in (obj["metadata"].get("annotations") or {})
                for _, obj in recorder.versions()
            ),
            timeout_s=30,
            what="the watch seeing the annotation",
        )
        faultfleet.wait_converged(tb, ns, fleet, timeout_s=60)
        story.freeze(store, frozen=True)
        try:
            assert faultfleet.broker_silent(pod, deadline_s=deadline_s)
            assert faultfleet.broker_silent(pod, deadline_s=1.0)
        finally:
            story.freeze(store, frozen=False)
        answered_at = time.monotonic()
        assert not faultfleet.broker_silent(pod, deadline_s=deadline_s), "no answer after SIGCONT"
        # The claim is "never", so it needs a window: rounds that met the silence finish at
        # most one deadline after the broker answers again; a whole resync interval after that
        # every object has had a round with the broker answering. Meanwhile read the fleet.
        waiting.until(
            lambda: (
                time.monotonic() - answered_at >= deadline_s + resync_s
                and not faultfleet.stragglers(tb, ns, fleet)
            ),
            timeout_s=60,
            what="a resync interval and a deadline past the slow spell, the fleet converged",
        )
    troubles = [t for plural, obj in recorder.versions() if (t := reported_trouble(plural, obj))]
    assert troubles == [], f"{len(troubles)} reports while faults-1 answered late:\n" + "\n".join(
        troubles[:10]
    )
    assert faultfleet.tracebacks(operator_log(tb)[log_before:]) == []


def test_a_broker_unreachable_while_100_crs_change_then_all_converge(
    popfleet_release: cluster.Cluster, ns: str, fleets: list[str]
) -> None:
    tb = popfleet_release
    base = Fleet("out", CLUSTER, BROKERS, PAIRS // 2)
    added = Fleet("out", CLUSTER, BROKERS, PAIRS // 2, first=PAIRS // 2)
    everything = Fleet("out", CLUSTER, BROKERS, PAIRS)
    apply_fleet(tb, ns, base, fleets)
    faultfleet.wait_converged(tb, ns, base, timeout_s=120)
    log_before = len(operator_log(tb))

    pod = broker_pod(tb, ns, 2)
    store = story.container_process(tb, pod, "store")
    story.freeze(store, frozen=True)
    try:
        for i in base.indexes:
            story.patch_spec(tb, ns, "consumergroups", base.group(i), {"consumeMode": "POP"})
            story.patch_spec(tb, ns, "topics", base.topic(i), {"queues": 8})
        apply_fleet(tb, ns, added, fleets)

        def all_report_faults_2() -> bool:
            found = faultfleet.listing(tb, ns, everything.prefix)
            if len(found) != len(everything.names):
                return False
            for obj in found.values():
                degraded = story.condition(obj, "Degraded")
                if not (
                    degraded.get("status") == "True"
                    and degraded.get("reason") == "BrokerUnreachable"
                    and "faults-2" in degraded.get("message", "")
                    and degraded.get("observedGeneration") == obj["metadata"]["generation"]
                ):
                    return False
            return True

        waiting.until(
            all_report_faults_2, timeout_s=90, what="all 100 changed CRs: Degraded, faults-2"
        )
        for plural, name in everything.names:
            obj = story.get(tb, ns, plural, name)
            assert obj is not None
            assert story.condition(obj, "Ready")["status"] == "False", (plural, name)
            entry = next(b for b in obj["status"]["brokers"] if b["name"] == "faults-2")
            assert not entry["synced"], (plural, name, entry)
    finally:
        story.freeze(store, frozen=False)

    faultfleet.wait_converged(tb, ns, everything, timeout_s=120)
    for i in base.indexes:
        topic = story.get(tb, ns, "topics", base.topic(i))
        assert topic is not None
        assert [b["queues"] for b in topic["status"]["brokers"]] == [8] * BROKERS
    for pod in story.broker_pods(tb, ns, CLUSTER):
        topics = {t.name: t.write_queue_nums for t in story.on_broker(pod, lambda a: a.topics())}
        assert {everything.topic(i) for i in everything.indexes} <= set(topics)
        assert all(topics[base.topic(i)] == 8 for i in base.indexes)

    # Events: the unreachable broker was named on the changed objects; each said when it
    # was confirmed on all brokers again (a switched group twice: before the outage and
    # after it). kopf posts Events from a queue after the status patch, and drops one the
    # apiserver does not take, saying so in the log ("Failed to post an event"): wait for
    # them, and accept a missing one only where the log tells that it was dropped.
    names = [name for _, name in everything.names]
    switched = [base.group(i) for i in base.indexes]
    wanted = {n: 2 if n in switched else 1 for n in names}

    def untold() -> list[str]:
        found = faultfleet.events(tb, ns)
        return sorted(
            n
            for n, count in wanted.items()
            if len(faultfleet.events_about(found, n, reason="AllBrokersConfirmed")) < count
        )

    missing: list[str] = []

    def all_told() -> bool:
        nonlocal missing
        missing = untold()
        return not missing

    try:
        waiting.until(all_told, timeout_s=30, what="every recovery told")
    except errors.Timeout:
        log = operator_log(tb)[log_before:]
        dropped = {
            n
            for n in missing
            for line in faultfleet.lines_naming(log, ns, [n])
            if "Failed to post an event" in line and "AllBrokersConfirmed" in line
        }
        about = "\n".join(faultfleet.lines_naming(log, ns, missing)[-20:])
        assert sorted(set(missing) - dropped) == [], f"recoveries not told; their log:\n{about}"
    found = faultfleet.events(tb, ns)
    unreachable = [e for e in found if "faults-2" in e.get("message", "")]
    assert unreachable, "no Event named the unreachable broker faults-2"
    # The log: no traceback, and the outage told per object.
    log = operator_log(tb)[log_before:]
    assert faultfleet.tracebacks(log) == []
    told = [line for line in faultfleet.lines_naming(log, ns, names) if "faults-2" in line]
    assert told, "no operator log line names an object ([ns/name]) and the unreachable faults-2"


def test_the_operator_pod_deleted_mid_fan_out_the_next_one_finishes(
    popfleet_release: cluster.Cluster, ns: str, fleets: list[str]
) -> None:
    """The old operator is frozen (SIGSTOP) once the first object of the fleet's first half
    converged, then its pod is deleted with a zero grace period: the fan-out is cut where it
    stands, as an OOM kill or a lost node would cut it, leaving the old pod's peering record
    for the next pod.

    Deleting alone does not cut it: until the kubelet acts on the deletion the old process
    runs on, and it finished all 100 objects in that time (seen on the testbed); on a fast
    machine it even finished a whole fleet between two polls (seen in CI). So the second half
    is applied while the old operator is frozen: the next pod always has work left to prove.
    """
    tb = popfleet_release
    fleet = Fleet("op", CLUSTER, BROKERS, PAIRS)
    first = Fleet("op", CLUSTER, BROKERS, PAIRS // 2)
    rest = Fleet("op", CLUSTER, BROKERS, PAIRS - first.count, first=first.count)
    old = operator_pod(tb)
    apply_fleet(tb, ns, first, fleets)
    waiting.until(
        lambda: faultfleet.converged_count(tb, ns, first) > 0,
        timeout_s=60,
        what="the fan-out under way (one object converged)",
    )
    process = story.container_process(tb, old, "operator")
    story.freeze(process, frozen=True)
    try:
        apply_fleet(tb, ns, rest, fleets)
        left = len(faultfleet.stragglers(tb, ns, fleet))
        assert left >= len(rest.names), "the frozen operator converged objects"
        tb.kubectl(
            "delete", "pod", old["metadata"]["name"], "-n", OPERATOR_NS,
            "--grace-period=0", "--force", "--wait=true", "--timeout=60s", timeout_s=90,
        )  # fmt: skip
        # What the old pod converged (its process is gone: every write of it has landed).
        # An Event it had queued when it was frozen may be lost with it: Kubernetes Events
        # are best effort, and kopf posts them from a queue after the handler returns.
        unfinished = faultfleet.stragglers(tb, ns, fleet)
        by_old = {name for plural, name in fleet.names if f"{plural}/{name}" not in unfinished}
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            story.freeze(process, frozen=False)  # the next tests need a live operator
        raise

    def replaced() -> dict[str, Any] | None:
        pods = tb.pods(OPERATOR_NS, OPERATOR_SELECTOR)
        fresh = [p for p in pods if p["metadata"]["uid"] != old["metadata"]["uid"]]
        return fresh[0] if len(pods) == len(fresh) == 1 and tb.is_ready(fresh[0]) else None

    new = waiting.until(replaced, timeout_s=120, what="only the next operator pod, Ready")
    faultfleet.wait_converged(tb, ns, fleet, timeout_s=180)

    names = [name for _, name in fleet.names]
    waiting.until(
        lambda: bool(faultfleet.lines_naming(tb.log(new), ns, names)),
        timeout_s=30,
        what=f"the new operator's log naming an object [ns/name] ({left} were left to it)",
    )
    assert faultfleet.tracebacks(tb.log(new)) == []
    # Each object the new pod converged said it was confirmed on all brokers; so did the old
    # pod's, except those whose Event was still in its queue when it was frozen.
    found = faultfleet.events(tb, ns)
    confirmed = {
        n for n in names if faultfleet.events_about(found, n, reason="AllBrokersConfirmed")
    }
    by_new = set(names) - by_old
    assert len(by_new) >= len(rest.names), "the old pod converged objects of the second half"
    missing = sorted(by_new - confirmed)
    assert missing == [], f"{len(missing)} of the {len(by_new)} left to the new pod never told"


def test_the_api_server_restarted_mid_reconcile_everything_converges(
    popfleet_release: cluster.Cluster, ns: str, fleets: list[str]
) -> None:
    """The restart comes once the first object of a new fleet converged; the resync timers
    (2 s) of every object keep rounds in flight in any case."""
    tb = popfleet_release
    fleet = Fleet("api", CLUSTER, BROKERS, PAIRS)
    pod = operator_pod(tb)
    log_before = len(tb.log(pod))
    apply_fleet(tb, ns, fleet, fleets)
    waiting.until(
        lambda: faultfleet.converged_count(tb, ns, fleet) > 0,
        timeout_s=60,
        what="the fan-out under way (one object converged)",
    )
    controlplane.restart_apiserver(tb.info)
    faultfleet.wait_converged(tb, ns, fleet, timeout_s=180)

    after = operator_pod(tb)
    assert after["metadata"]["uid"] == pod["metadata"]["uid"], "the operator pod was replaced"
    assert story.restarts(after) == story.restarts(pod), "the operator restarted"
    log = tb.log(after)[log_before:]
    assert faultfleet.tracebacks(log) == [], "\n".join(log.splitlines()[-40:])
    names = [name for _, name in fleet.names]
    troubles = set(faultfleet.warnings_and_errors(log))
    told = [line for line in faultfleet.lines_naming(log, ns, names) if line in troubles]
    assert told, "no warning or error in the operator log names an object ([ns/name])"
