"""The floor under a Python v2 endpoint: grpc.aio's server CPU per streamed message.

A v2 ``ReceiveMessage`` answer is a server stream with one response per message.
This measures what grpc.aio alone costs the server for that shape, with nothing
of ours in it, next to the same bytes sent as one unary answer per batch (what
popack answers popfront, :mod:`popbroker.grpc.front`):

* ``stream``: a unary-stream method yielding ``--batch`` responses of
  ``--size`` bytes per call;
* ``unary``: a unary method answering the ``--batch`` responses joined in one.

The server is a grpc.aio process of its own on 127.0.0.1 with raw-bytes
handlers (no protobuf); ``--clients`` concurrent grpc.aio callers in this
process each make ``--calls`` calls in turn. The figure is the server's CPU
seconds (``/proc``) divided by the messages, the median of ``--runs`` runs per
shape (shapes alternate); the load average is recorded at each run's start.
This is the number the design note
``docs/design/2026-11-27-compiled-front-end.md`` starts from.

Run: ``python -m bench.grpc_floor`` (part of ``make bench``). Not a test:
nothing asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import time
from typing import Any

import grpc

from bench import common
from bench.peers import cpu, procs

SERVICE = "floor.Floor"
READY_TIMEOUT_S = 30.0


def _serve(port: int, size: int, batch: int, ready: Any) -> None:
    message = b"x" * size

    async def stream(_request: bytes, _context: Any) -> Any:
        for _ in range(batch):
            yield message

    async def unary(_request: bytes, _context: Any) -> bytes:
        return message * batch

    async def run() -> None:
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Stream": grpc.unary_stream_rpc_method_handler(stream),
                "Unary": grpc.unary_unary_rpc_method_handler(unary),
            },
        )
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        ready.set()
        await server.wait_for_termination()

    asyncio.run(run())


async def _drive(port: int, shape: str, calls: int, clients: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        if shape == "stream":
            streaming = channel.unary_stream(f"/{SERVICE}/Stream")

            async def one() -> None:
                for _ in range(calls):
                    async for _response in streaming(b""):
                        pass

        else:
            unary = channel.unary_unary(f"/{SERVICE}/Unary")

            async def one() -> None:
                for _ in range(calls):
                    await unary(b"")

        await asyncio.gather(*(one() for _ in range(clients)))


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=250, help="calls per client per run")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=1024)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    port = procs.free_port()
    ready = multiprocessing.Event()
    server = multiprocessing.Process(
        target=_serve, args=(port, args.size, args.batch, ready), daemon=True
    )
    server.start()
    try:
        if not ready.wait(READY_TIMEOUT_S) or server.pid is None:
            raise RuntimeError("the grpc.aio server did not start")
        pid = server.pid
        runs: dict[str, list[dict[str, float]]] = {"stream": [], "unary": []}
        for _ in range(args.runs):
            for shape, rows in runs.items():
                before = cpu.read([pid])
                started = time.monotonic()
                asyncio.run(_drive(port, shape, args.calls, args.clients))
                wall = time.monotonic() - started
                after = cpu.read([pid])
                messages = args.calls * args.clients * args.batch
                cpu_s = after.cpu_s_since(before)
                rows.append(
                    {
                        "msgs_per_s": round(messages / wall, 1),
                        "server_cpu_us_per_msg": round(cpu_s * 1e6 / messages, 2),
                        "server_cpu_share": round(cpu_s / wall, 3),
                        "load_1m_start": before.load_1m,
                        "steal_pct": cpu.steal_pct(before, after) or 0.0,
                    }
                )
    finally:
        if server.pid is not None and server.is_alive():
            os.kill(server.pid, 9)
        server.join(10)
    medians = {
        shape: {key: common.median([r[key] for r in rows]) for key in rows[0]}
        for shape, rows in runs.items()
    }
    path = common.write(
        "grpc_floor",
        {"config": vars(args), "runs": runs, "median": medians},
    )
    for shape, figures in medians.items():
        print(
            f"{shape:<7} {figures['msgs_per_s']:>9.0f} msgs/s  "
            f"server {figures['server_cpu_us_per_msg']:.1f} us/msg "
            f"({figures['server_cpu_share'] * 100:.0f}% of a core)"
        )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
