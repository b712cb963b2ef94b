"""The operator's and the brokers' logs: collected along the way, checked for unexpected errors.

Why: a story can pass its assertions while a component logs tracebacks on the side. Pods do
not outlive the story (a broker pod is deleted on purpose, ``helm upgrade`` replaces the
operator's pod), so ``LogBook`` takes each pod's logs before it goes (``kubectl logs``) and
``unexpected`` checks them all at the end. An ERROR/CRITICAL line or a traceback counts unless
it matches ``EXPECTED``: things that are logged at ERROR by design while the story runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from popfleet_e2e.access import ClusterAccess, ScenarioError

BROKER_CONTAINERS = ("store", "popack", "revive", "front")
OPERATOR_SELECTOR = "app.kubernetes.io/name=popfleet-operator"

EXPECTED = re.compile(
    r"failed temporarily"  # operator: a TemporaryError, retried with back-off by design
    r"|storage is \(re\)initializing"  # the apiserver warming a new CRD's watch cache
)


def unexpected(text: str) -> list[str]:
    """The offending lines of ``text``: each unexpected ERROR/CRITICAL line, and each traceback
    as one entry from the line that logged it to its exception, so a failure says what failed."""
    lines = text.splitlines()
    bad = [
        line
        for line in lines
        if (" ERROR " in line or " CRITICAL " in line) and not EXPECTED.search(line)
    ]
    tracebacks = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    return bad + [_traceback_at(lines, i) for i in tracebacks]


def _traceback_at(lines: Sequence[str], start: int) -> str:
    """The traceback starting at ``lines[start]``: the log line before it, the frames, and the
    exception line that ends it."""
    block = list(lines[max(start - 1, 0) : start + 1])
    for line in lines[start + 1 :]:
        block.append(line)
        if not line[:1].isspace():  # the exception line ends the traceback
            break
    return "\n    ".join(block)


@dataclass
class LogBook:
    """``"<namespace>/<pod>/<container>@<uid>"`` -> the log text last read."""

    texts: dict[str, str] = field(default_factory=dict)

    def _take(self, access: ClusterAccess, namespace: str, pod: str, container: str) -> None:
        found = access.get_or_none("pod", pod, namespace=namespace)
        if found is None:
            return
        uid = found["metadata"]["uid"]
        try:
            text = access.kubectl("logs", pod, "-c", container, "-n", namespace)
        except ScenarioError as exc:  # a container not started yet has no log
            text = f"(no log: {exc})"
        self.texts[f"{namespace}/{pod}/{container}@{uid}"] = text

    def collect_brokers(self, access: ClusterAccess, pods: Sequence[str] = ()) -> None:
        names = list(pods) or [
            p["metadata"]["name"]
            for p in access.items("pods", selector="popfleet.io/cluster")
            if not p["metadata"].get("deletionTimestamp")
        ]
        for pod in names:
            for container in BROKER_CONTAINERS:
                self._take(access, access.namespace, pod, container)

    def collect_operator(self, access: ClusterAccess) -> None:
        ns = access.release_namespace
        for pod in access.items("pods", namespace=ns, selector=OPERATOR_SELECTOR):
            self._take(access, ns, pod["metadata"]["name"], pod["spec"]["containers"][0]["name"])

    def problems(self) -> dict[str, list[str]]:
        found = {where: unexpected(text) for where, text in self.texts.items()}
        return {where: lines for where, lines in found.items() if lines}


def check(logbook: LogBook) -> str:
    """Fail with the offending lines when any collected log has an unexpected error."""
    problems = logbook.problems()
    if problems:
        shown = "\n".join(
            f"{where} ({len(lines)}):\n  " + "\n  ".join(lines[:8])
            for where, lines in problems.items()
        )
        raise ScenarioError(f"unexpected errors in logs:\n{shown}")
    return f"{len(logbook.texts)} logs checked, no unexpected errors"
