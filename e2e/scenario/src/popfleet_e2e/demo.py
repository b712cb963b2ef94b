"""``make demo``: the user story live on the local testbed, running until interrupted.

``popfleet-demo up``: bring up a testbed in ``--run-dir`` (or reuse the one running there),
then run the scenario's first steps (``scenario.SETUP``: helm install, 3 brokers, the example
Topic and ConsumerGroup, traffic with one hung consumer, PULL -> POP, the backlog drains),
show ``kubectl get bc,mqt,cg`` and the audit summary when there is one, and keep the traffic
going with a status line every ``--every-s`` seconds until SIGINT/SIGTERM. The testbed stays
up afterwards so that people can look around with kubectl.

When KEDA and Prometheus are built here (``make keda-bin prometheus-bin``; ``make demo`` passes
their paths), an optional elastic act follows the story before the status lines: Prometheus
and KEDA start beside the testbed (``beside``) and the kind KEDA story runs on it (``elastic``):
a slow consumer Deployment that KEDA scales 2 -> 8 on its group's lag stays flat in PULL on 2
queues, drains the backlog once patched to POP, and grows with its replicas in POP. Without
the builds the act is skipped with a line that says how to get it; ``--no-elastic`` skips it.
``popfleet-demo elastic`` (``make demo-elastic``) runs the act alone on the testbed of a
running demo.

``popfleet-demo down``: stop a running demo (its PID is recorded in the run directory, with
the start time that guards against PID reuse), what runs beside the testbed, then the testbed
(by its recorded PIDs).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from popfleet_e2e import auditing, beside, brokers, elastic, scenario, steps
from popfleet_e2e import testbed as testbed_access
from popfleet_e2e.access import ClusterAccess, ScenarioError
from popfleet_testbed import controlplane, errors, processes

NAMESPACE = "demo"
PID_FILE = "demo.pid"
AUDIT_SCHEDULE = "*/2 * * * *"
_NO_AUDIT_YET = (
    f"audit: scheduled '{AUDIT_SCHEDULE}' (a Spark Job); its summary is printed when a run ends"
)
MAX_RUN_S = 8 * 3600  # the traffic's own bound; Ctrl-C or make demo-down end it sooner
INTRO = """popfleet demo: the user story on a local Kubernetes testbed (no Docker)
  a real kube-apiserver, controller-manager and scheduler on 127.0.0.1, and a process kubelet
  that runs each pod's containers as local processes with a loopback pod IP. Next: helm install
  the chart, 3 brokers, a topic and a PULL group, traffic with one consumer that hangs, then
  the group switched to POP so that nobody waits for the hung consumer any more.
"""


def say(line: str) -> None:
    print(line, flush=True)


def _testbed(run_dir: Path) -> controlplane.Info:
    if controlplane.running(run_dir) and (run_dir / "testbed.json").exists():
        say(f"testbed: reusing the one running in {run_dir}")
        return controlplane.Info.load(run_dir)
    say(f"testbed: starting the control plane and the process kubelet in {run_dir}")
    started = time.monotonic()
    info = controlplane.up(run_dir)
    say(f"testbed: up in {time.monotonic() - started:.0f}s at {info.server_url}")
    return info


def _show(access: ClusterAccess) -> None:
    say(f"\n$ kubectl get bc,mqt,cg -n {access.namespace}")
    say(access.kubectl("get", "bc,mqt,cg", "-n", access.namespace).rstrip())
    audit = auditing.group_audit(access, steps.GROUP)
    say(f"audit of {steps.GROUP}: {auditing.summary(audit)}" if audit else _NO_AUDIT_YET)


def _status_line(story: steps.Story) -> str:
    counts = story.running_traffic().tally.counts()
    access = story.access
    try:
        listed = brokers.current(access, steps.CLUSTER)
        lag = sum(brokers.lag_by_queue(access, listed, steps.GROUP, steps.TOPIC).values())
        flying = brokers.in_flight(access, listed, steps.GROUP, steps.TOPIC)
        broker_text = f"lag {lag}, in flight {flying}"
    except ScenarioError as exc:
        broker_text = f"brokers not answering ({exc})"
    return (
        f"{time.strftime('%H:%M:%S')}  sent {counts['acked']} (failed {counts['failed_sends']})"
        f"  consumed {counts['consumed']}  redelivered {counts['redelivered']}  {broker_text}"
    )


def _new_audit(access: ClusterAccess, seen_run: str) -> str:
    """Print the group's audit summary when a run newer than ``seen_run`` wrote one."""
    try:
        audit = auditing.group_audit(access, steps.GROUP)
    except ScenarioError:
        return seen_run
    run = str(audit.get("run") or "")
    if run and run != seen_run:
        say(f"          audit of {steps.GROUP}: {auditing.summary(audit)}")
    return run or seen_run


def _hints(info: controlplane.Info) -> None:
    say("\nLook around (in another shell):")
    say(f"  export PATH={info.bin_dir}:$PATH")
    say(f"  export KUBECONFIG={info.layout.admin_kubeconfig}")
    say(f"  kubectl get bc,mqt,cg -n {NAMESPACE}        # MODE, SYNCED, LAG, BACKLOG")
    say(f"  kubectl describe cg {steps.GROUP} -n {NAMESPACE}   # ModeApplied, per-broker modes")
    say(f"  kubectl logs {steps.CLUSTER}-0 -c popack -n {NAMESPACE}")
    say("Stop with Ctrl-C (traffic stops, the testbed stays); `make demo-down` stops everything.\n")


def _reset_group(access: ClusterAccess) -> None:
    """A testbed kept from an earlier demo has the group in POP: start again from PULL."""
    try:
        group = access.get_or_none("consumergroup", steps.GROUP)
    except ScenarioError:  # a fresh testbed: no CRDs yet, so nothing to reset
        return
    if group is not None:
        say(f"resetting {steps.GROUP} to PULL (kept from an earlier demo on this testbed)")
        access.merge_patch(
            "consumergroup", steps.GROUP, {"spec": {"consumeMode": "PULL", "popShareQueueNum": 0}}
        )


ELASTIC_INTRO = """
The elastic act: consumers scaled on their lag by KEDA, PULL against POP.
  A BrokerCluster 'elastic' of one broker, a topic of 2 queues and a group in PULL; a slow
  consumer Deployment (the official client, ~10 messages/s a replica) that a ScaledObject made
  from crds/examples/keda scales from 2 to 8 on the group's lag as Prometheus scrapes it, and
  a producer above what 2 replicas drain. In PULL a queue belongs to one consumer: replicas
  beyond the 2 queues idle. Patched to POP, all of them consume. (~6 min)
"""


def _elastic_act(info: controlplane.Info, access: ClusterAccess, builds: beside.Builds) -> bool:
    """The optional act; a failure is reported (False) and the demo goes on with its story."""
    missing = builds.missing()
    if missing:
        say(f"\nelastic act (KEDA): skipped: {missing}")
        return True
    say(ELASTIC_INTRO)
    stopped = beside.stop(info.run_dir)  # an earlier act's, with certificates now replaced
    if stopped:
        say(f"stopped what an earlier act ran beside the testbed: {', '.join(stopped)}")
    act_story = steps.Story(access)
    try:
        scenario.run_steps(act_story, beside.act(info, builds), say=say)
        say(f"Prometheus keeps running at {act_story.access.prometheus_url} "
            "(make demo-down stops it, and KEDA)")  # fmt: skip
        return True
    except ScenarioError as exc:
        say(f"elastic act failed: {exc}")
        say(f"  logs of Prometheus and KEDA: {beside.Layout(info.run_dir).logs}")
        return False
    finally:
        elastic.stop(act_story)


def elastic_again(run_dir: Path, builds: beside.Builds | None) -> int:
    """``popfleet-demo elastic``: the elastic act alone, on the testbed a demo runs."""
    if builds is None:
        say("popfleet-demo elastic needs --keda-bin and --prometheus (make demo-elastic)")
        return 2
    if not controlplane.running(run_dir):
        say(f"no testbed runs in {run_dir}: `make demo` first")
        return 1
    info = controlplane.Info.load(run_dir)
    return 0 if _elastic_act(info, testbed_access.access(info, NAMESPACE), builds) else 1


def up(
    run_dir: Path, *, every_s: float, builds: beside.Builds | None = None
) -> int:  # fmt: skip
    run_dir.mkdir(parents=True, exist_ok=True)
    running = processes.read_pid_file(run_dir / PID_FILE)
    if running is not None and processes.alive(running):
        say(f"a demo already runs in {run_dir} (pid {running.pid}); `make demo-down` stops it")
        return 1
    pid = os.getpid()
    me = processes.Recorded(pid=pid, start_ticks=processes.start_ticks(pid) or -1)
    processes.write_pid_file(run_dir / PID_FILE, me)
    say(INTRO)
    info = _testbed(run_dir)
    access = testbed_access.access(info, NAMESPACE)
    story = steps.Story(access, traffic_max_s=MAX_RUN_S)
    try:
        _reset_group(access)
        scenario.run_steps(story, scenario.SETUP, say=say)
        auditing.enable(access, steps.CLUSTER, schedule=AUDIT_SCHEDULE)
        _show(access)
        if builds is not None:
            _elastic_act(info, access, builds)
        _hints(info)
        stop = threading.Event()  # from here on, Ctrl-C and SIGTERM end the loop cleanly
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda _signum, _frame: stop.set())
        say(
            "Traffic keeps flowing. 'in flight' = popped, not acked yet: the hung consumer's\n"
            "messages stay there until their invisible time (60 s) ends; then revive hands\n"
            "them to the healthy consumers."
        )
        audited_by = ""
        while not stop.wait(every_s):
            say(_status_line(story))
            audited_by = _new_audit(access, audited_by)
    finally:
        if story.traffic is not None:
            say("stopping the traffic ...")
            story.traffic.stop()
        (run_dir / PID_FILE).unlink(missing_ok=True)
    say(f"demo stopped; the testbed still runs in {run_dir} (`make demo-down` stops it)")
    return 0


def _stop_demo(recorded: processes.Recorded, *, grace_s: float = 60) -> None:
    """SIGTERM the demo process (not a group leader: make started it), SIGKILL after grace."""
    os.kill(recorded.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while processes.alive(recorded) and time.monotonic() < deadline:
        time.sleep(0.2)
    if processes.alive(recorded):
        os.kill(recorded.pid, signal.SIGKILL)


def down(run_dir: Path) -> int:
    recorded = processes.read_pid_file(run_dir / PID_FILE)
    if recorded is not None and processes.alive(recorded):
        say(f"stopping the demo (pid {recorded.pid}): traffic first ...")
        _stop_demo(recorded)
    (run_dir / PID_FILE).unlink(missing_ok=True)
    stopped = beside.stop(run_dir)
    if stopped:
        say(f"stopped what ran beside the testbed: {', '.join(stopped)}")
    if (run_dir / "testbed.json").exists() or controlplane.running(run_dir):
        say(f"stopping the testbed in {run_dir} (brokers, operator, control plane) ...")
        controlplane.down(run_dir)
    say("demo down: nothing left running")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="popfleet-demo", description=__doc__)
    parser.add_argument("cmd", choices=("up", "down", "elastic"))
    parser.add_argument("--run-dir", type=Path, default=Path("/tmp/popfleet-demo"))
    parser.add_argument("--every-s", type=float, default=15.0, help="status line interval")
    parser.add_argument("--keda-bin", type=Path, help="make keda-bin's directory (elastic act)")
    parser.add_argument("--prometheus", type=Path, help="make prometheus-bin's prometheus")
    parser.add_argument("--no-elastic", action="store_true", help="skip the elastic act")
    args = parser.parse_args(argv)
    run_dir = args.run_dir.resolve()
    builds = None
    if not args.no_elastic and args.keda_bin is not None and args.prometheus is not None:
        builds = beside.Builds(keda_bin=args.keda_bin, prometheus=args.prometheus)
    try:
        if args.cmd == "down":
            return down(run_dir)
        if args.cmd == "elastic":
            return elastic_again(run_dir, builds)
        return up(run_dir, every_s=args.every_s, builds=builds)
    except KeyboardInterrupt:  # Ctrl-C before the traffic loop (which handles it itself)
        say(f"popfleet-demo {args.cmd}: interrupted; `make demo-down` stops what is left")
        return 130
    except (ScenarioError, errors.TestbedError) as exc:
        say(f"popfleet-demo {args.cmd} failed: {exc}")
        if args.cmd == "up":
            say("the testbed may still run: `make demo-down` stops it")
        return 1


if __name__ == "__main__":
    sys.exit(main())
