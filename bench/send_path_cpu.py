"""CPU per message of popack's send path in one process, this tree against a git revision.

What a change to the Python send path does to its CPU cost, without the load generator,
popfront or the host's varying speed between runs in the figure: the v2 servicer's
``SendMessage`` on a ``LocalStore`` in a temporary directory, fed requests of ``--batch``
messages of ``--body-bytes`` (as the load generator sends them), timed with the process's
CPU clock (user + system, so the store's writes count). With ``--against REV`` the same
measurement runs on a worktree of ``REV`` (its ``broker_image/src`` first on the path),
alternating with this tree ``--rounds`` times, and the JSON gives both medians and their
ratio. The host's speed changes by hours; alternating in one run is what makes the two
comparable.

``.venv/bin/python -m bench.send_path_cpu [--against HEAD~1] [--rounds 5]`` (quiet
machine). Not part of ``make bench``: it answers "did this change help", not "how fast is
the broker" (that is ``bench.pop_peers_loadgen``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common
from popbroker.grpc.protocol import definition, service
from popbroker.grpc.servicer import MessagingServicer
from popbroker.services.popack import PopackServices
from popbroker.services.routing import Endpoint
from popbroker.services.settings import PopackSettings
from popbroker.store.api import TopicConfig
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "bench"
WARMUP_REQUESTS = 50


def _request(index: int, *, batch: int, body_bytes: int) -> Any:
    request = service.SendMessageRequest()
    body = b"x" * body_bytes
    for j in range(batch):
        message = request.messages.add()
        message.topic.name = TOPIC
        message.body = body
        props = message.system_properties
        props.message_id = f"{index:010d}{j:06d}"
        props.message_type = definition.NORMAL
        props.born_host = "loadgen"
        props.born_timestamp.seconds = 1_700_000_000
    return request


async def _measure(requests: int, *, batch: int, body_bytes: int) -> float:
    """CPU microseconds per message over ``requests`` SendMessage calls after a warm-up."""
    with tempfile.TemporaryDirectory() as scratch:
        store = LocalStore.open(Path(scratch) / "data", StoreSettings())
        try:
            await store.put_topic(TopicConfig(TOPIC, 8, 8))
            endpoint = Endpoint("127.0.0.1", 8081)
            popack = await PopackServices.open(
                store, advertised=endpoint, settings=PopackSettings()
            )
            servicer = MessagingServicer(popack, advertised=endpoint)
            calls = [
                _request(i, batch=batch, body_bytes=body_bytes)
                for i in range(WARMUP_REQUESTS + requests)
            ]
            warmup, timed = calls[:WARMUP_REQUESTS], calls[WARMUP_REQUESTS:]
            for request in warmup:
                await servicer.SendMessage(request, None)
            started = time.process_time()
            responses = [await servicer.SendMessage(request, None) for request in timed]
            cpu_s = time.process_time() - started
            refused = [r.status for r in responses if r.status.code != definition.Code.OK]
            if refused:
                raise RuntimeError(f"SendMessage failed {len(refused)} times: {refused[0]}")
        finally:
            await store.close()
    return cpu_s / (requests * batch) * 1e6


def _one(src: Path | None, args: argparse.Namespace) -> float:
    """One measurement in a fresh interpreter (``src`` first on its path, if given)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "bench.send_path_cpu", "--one",
            "--requests", str(args.requests), "--batch", str(args.batch),
            "--body-bytes", str(args.body_bytes)]  # fmt: skip
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout)["cpu_us_per_msg"])


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="a git revision to compare this tree with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--name", default="send_path_cpu", help="results file (no .json)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.one:
        cpu = asyncio.run(_measure(args.requests, batch=args.batch, body_bytes=args.body_bytes))
        print(json.dumps({"cpu_us_per_msg": cpu}))
        return 0
    payload: dict[str, Any] = {
        "benchmark": "send_path_cpu",
        "machine": common.machine(),
        "requests": args.requests,
        "batch": args.batch,
        "body_bytes": args.body_bytes,
    }
    with tempfile.TemporaryDirectory() as scratch:
        worktree = Path(scratch) / "against"
        if args.against:
            subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.against],
                           cwd=ROOT, check=True, capture_output=True)  # fmt: skip
        try:
            this: list[float] = []
            other: list[float] = []
            for _ in range(args.rounds):  # alternating: the host's drift hits both alike
                this.append(_one(None, args))
                if args.against:
                    other.append(_one(worktree / "broker_image" / "src", args))
        finally:
            if args.against:
                subprocess.run(["git", "worktree", "remove", "--force", str(worktree)],
                               cwd=ROOT, check=True, capture_output=True)  # fmt: skip
    payload["this_tree_us_per_msg"] = this
    payload["this_tree_median"] = round(common.median(this), 2)
    print(f"this tree          {payload['this_tree_median']:7.2f} us/msg  {this}")
    if args.against:
        payload["against"] = args.against
        payload["against_us_per_msg"] = other
        payload["against_median"] = round(common.median(other), 2)
        payload["ratio_this_over_against"] = round(
            payload["this_tree_median"] / payload["against_median"], 3
        )
        print(f"{args.against:18s} {payload['against_median']:7.2f} us/msg  {other}")
        print(f"ratio this/against {payload['ratio_this_over_against']}")
    print(f"wrote {common.write(args.name, payload)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
