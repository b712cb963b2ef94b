"""A minimal HTTP CONNECT proxy: how the e2e test process reaches broker pods on kind.

Why: the scenario's process (on the host) dials brokers' client and admin endpoints, which are
pod IPs, and kind (>= v0.24) enforces NetworkPolicies: the brokers admit their admin port only
from the operator's pods. ``kind_access.py`` runs this proxy in a pod labelled like the
operator, port-forwards to it, and sets ``grpc_proxy`` for the test process, so every gRPC
channel (the official client's and the admin client's) is tunnelled through that pod.

Standard library only (it runs in the operator image). Only ``CONNECT host:port`` to an IP in
``ALLOW_CIDR`` is accepted; anything else is answered 403 (or 405/400) and closed.

    ALLOW_CIDR=10.244.0.0/16 LISTEN=0.0.0.0:3128 python connect_proxy.py
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import sys

HEADER_LIMIT = 8192


def target_of(request_line: str, allowed: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str:
    """``host:port`` of an allowed ``CONNECT`` request line; ValueError says why not."""
    parts = request_line.split()
    if len(parts) != 3 or parts[0] != "CONNECT":
        raise ValueError("405 only CONNECT is served")
    host, sep, port = parts[1].rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError("400 target is not host:port")
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError as exc:
        raise ValueError("403 target is not an IP address") from exc
    if address not in allowed:
        raise ValueError(f"403 {address} is outside {allowed}")
    return f"{address}:{port}"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


async def _serve(
    allowed: ipaddress.IPv4Network | ipaddress.IPv6Network,
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
) -> None:
    try:
        head = await client_reader.readuntil(b"\r\n\r\n")
        if len(head) > HEADER_LIMIT:
            raise ValueError("400 header too long")
        target = target_of(head.split(b"\r\n", 1)[0].decode("latin-1"), allowed)
        host, _, port = target.rpartition(":")
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
    except ValueError as exc:
        client_writer.write(f"HTTP/1.1 {exc}\r\n\r\n".encode())
        client_writer.close()
        return
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        with contextlib.suppress(ConnectionError, OSError):
            client_writer.write(f"HTTP/1.1 502 {type(exc).__name__}\r\n\r\n".encode())
            client_writer.close()
        return
    client_writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    await client_writer.drain()
    await asyncio.gather(_pipe(client_reader, up_writer), _pipe(up_reader, client_writer))


async def serve(listen: str, allowed_cidr: str) -> None:
    allowed = ipaddress.ip_network(allowed_cidr)
    host, _, port = listen.rpartition(":")
    server = await asyncio.start_server(
        lambda r, w: _serve(allowed, r, w), host, int(port), limit=HEADER_LIMIT
    )
    names = ", ".join(str(s.getsockname()) for s in server.sockets)
    print(f"connect_proxy: listening on {names}, targets in {allowed}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> int:
    try:
        asyncio.run(serve(os.environ.get("LISTEN", "0.0.0.0:3128"), os.environ["ALLOW_CIDR"]))
    except KeyError:
        print("connect_proxy: set ALLOW_CIDR (e.g. 10.244.0.0/16)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
