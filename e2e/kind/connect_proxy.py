"""A minimal HTTP CONNECT proxy: how the e2e test process reaches broker pods on kind.

Why: the scenario's process (on the host) dials brokers' client and admin endpoints, which are
pod IPs, and kind (>= v0.24) enforces NetworkPolicies: the brokers admit their admin port only
from the operator's pods. ``kind_access.py`` runs this proxy in a pod labelled like the
operator, port-forwards to it, and sets ``grpc_proxy`` for the test process, so every gRPC
channel (the official client's and the admin client's) is tunnelled through that pod.

Standard library only (it runs in the operator image). Only ``CONNECT`` to IPs in
``ALLOW_CIDR`` (one network or several, comma-separated: the pod network, and the service
network for the brokers' client Service) is accepted; anything else is answered 403 (or
405/400) and closed. Each request is logged on one line (what was asked, the answer).

Targets gRPC sends (``target_of`` parses them all; ports 1-65535, hosts IP literals only):

* ``10.244.0.7:8081`` and ``[fd00::7]:8081``: one address;
* ``[10.244.0.48:8081,10.244.0.49:8081]:443``: a channel whose target lists several addresses
  (the official client's multi-endpoint bootstrap, ``ipv4:a:p,b:p``). gRPC's proxy mapper
  sends the whole list, bracketed because it contains ``:``, plus a default port 443 that
  is no target's: it is ignored;
* ``[fd00::7]:8081,[fd00::8]:8081``: the same for IPv6 addresses (already bracketed, so
  gRPC adds nothing).

Every address of a list must be in ``ALLOW_CIDR`` (else 403: one bad address refuses the
request); they are tried in order and the first that accepts is the tunnel's (502 if none).

Names: a host that is no IP literal is refused (403) unless it ends with one of the
suffixes in ``ALLOW_DOMAINS`` (comma-separated, e.g. ``.svc``: a replicated broker set's
Service, ``rep-0.story.svc``, which routes name). Such a name is resolved here, in the
pod (cluster DNS), and only its addresses inside ``ALLOW_CIDR`` are dialled (502 when it
has none): a name never widens what the proxy reaches. gRPC's proxy mapper sends the
target's name unresolved, so the host never looks a cluster name up.

    ALLOW_CIDR=10.244.0.0/16,10.96.0.0/16 ALLOW_DOMAINS=.svc LISTEN=0.0.0.0:3128 \
        python connect_proxy.py
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import sys

HEADER_LIMIT = 8192
MAX_ADDRESSES = 16
CONNECT_TIMEOUT_S = 5.0
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Target = tuple[str, int]  # (IP literal, or a name with an allowed suffix; port)


class Networks(tuple[Network, ...]):
    """Several networks (``ALLOW_CIDR=a,b``: the pod and the service network); an address is
    ``in`` them when it is in any one."""

    def __contains__(self, address: object) -> bool:
        return any(address in network for network in tuple.__iter__(self))

    def __str__(self) -> str:
        return ",".join(str(network) for network in tuple.__iter__(self))


def parse_networks(text: str) -> Networks:
    """``10.244.0.0/16,10.96.0.0/16`` -> Networks; ValueError for anything else."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise ValueError("no network given")
    return Networks(ipaddress.ip_network(part) for part in parts)


Allowed = Network | Networks


def _closing_bracket(text: str) -> int:
    """Index of the ``]`` that closes the ``[`` at ``text[0]``; -1 if it is never closed."""
    depth = 0
    for index, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0:
            return index
    return -1


def _named(host: str, domains: tuple[str, ...]) -> bool:
    """``host`` is a DNS name ending with one of the allowed suffixes (``.svc``)."""
    labels = host.split(".")
    well_formed = all(label and label.replace("-", "").isalnum() for label in labels)
    return well_formed and any(host.endswith(suffix) for suffix in domains if suffix)


def _address(item: str, allowed: Allowed, domains: tuple[str, ...] = ()) -> Target:
    """``ipv4:port``, ``[ipv6]:port`` or ``name:port`` (an allowed suffix), checked against
    ``allowed``; ValueError says why not."""
    host, sep, port = item.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"400 {item!r} is not host:port")
    bracketed = host.startswith("[") and host.endswith("]")
    if ("[" in host or "]" in host) and not bracketed:
        raise ValueError(f"400 {item!r}: unbalanced brackets")
    try:
        address = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError as exc:
        if not bracketed and _named(host, domains):
            return host, int(port)  # resolved and checked when dialled (_resolve)
        raise ValueError(f"403 {host!r} is not an IP address") from exc
    if bracketed != (address.version == 6):
        raise ValueError(f"400 {item!r}: IPv6 addresses, and only they, are bracketed")
    if address not in allowed:
        raise ValueError(f"403 {address} is outside {allowed}")
    return str(address), int(port)


def target_of(request_line: str, allowed: Allowed, domains: tuple[str, ...] = ()) -> list[Target]:
    """The addresses of an allowed ``CONNECT`` request line, in order; ValueError says why not.

    Pure. The ValueError's message starts with the HTTP status to answer.
    """
    parts = request_line.split()
    if len(parts) != 3 or parts[0] != "CONNECT":
        raise ValueError("405 only CONNECT is served")
    authority = parts[1]
    if authority.startswith("["):
        close = _closing_bracket(authority)
        inner, rest = authority[1:close], authority[close + 1 :]
        if close > 0 and "," in inner and rest[:1] == ":" and rest[1:].isdigit():
            authority = inner  # "[a:p,b:p]:443": the list; gRPC's default port is no target's
    items = authority.split(",")
    if len(items) > MAX_ADDRESSES:
        raise ValueError(f"400 more than {MAX_ADDRESSES} addresses")
    return [_address(item, allowed, domains) for item in items]


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


async def _resolve(targets: list[Target], allowed: Allowed) -> tuple[list[Target], list[str]]:
    """Names replaced by their addresses inside ``allowed`` (in the resolver's order); the
    names that had none, said why."""
    loop = asyncio.get_running_loop()
    out: list[Target] = []
    failures: list[str] = []
    for host, port in targets:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            out.append((host, port))
            continue
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            failures.append(f"{host}:{port} does not resolve ({exc})")
            continue
        found = [str(info[4][0]) for info in infos]
        inside = [a for a in dict.fromkeys(found) if ipaddress.ip_address(a) in allowed]
        if not inside:
            failures.append(f"{host}:{port} resolves outside {allowed}: {found}")
        out += [(a, port) for a in inside]
    return out, failures


async def _open_first(
    targets: list[Target], allowed: Allowed
) -> tuple[Target, asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the first target that accepts, in order (names resolved, their
    addresses checked); OSError if none does."""
    targets, failures = await _resolve(targets, allowed)
    for host, port in targets:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            failures.append(f"{host}:{port} {type(exc).__name__}")
            continue
        return (host, port), reader, writer
    raise OSError(f"no target accepted: {', '.join(failures)}")


def _log(line: str) -> None:
    print(f"connect_proxy: {line}", flush=True)


async def _serve(
    allowed: Allowed,
    domains: tuple[str, ...],
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
) -> None:
    request = "(no request line)"
    try:
        try:
            head = await client_reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:  # a bare TCP probe (the readiness probe): nothing to answer
                client_writer.close()
                return
            raise
        if len(head) > HEADER_LIMIT:
            raise ValueError("400 header too long")
        request = head.split(b"\r\n", 1)[0].decode("latin-1")
        targets = target_of(request, allowed, domains)
        (host, port), up_reader, up_writer = await _open_first(targets, allowed)
    except ValueError as exc:
        _log(f"{request!r} -> {exc}")
        client_writer.write(f"HTTP/1.1 {exc}\r\n\r\n".encode())
        client_writer.close()
        return
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        _log(f"{request!r} -> 502 {exc}")
        with contextlib.suppress(ConnectionError, OSError):
            client_writer.write(f"HTTP/1.1 502 {type(exc).__name__}\r\n\r\n".encode())
            client_writer.close()
        return
    _log(f"{request!r} -> 200 via {host}:{port}")
    client_writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    await client_writer.drain()
    await asyncio.gather(_pipe(client_reader, up_writer), _pipe(up_reader, client_writer))


async def serve(listen: str, allowed_cidr: str, allowed_domains: str = "") -> None:
    allowed = parse_networks(allowed_cidr)
    domains = tuple(d.strip() for d in allowed_domains.split(",") if d.strip())
    host, _, port = listen.rpartition(":")
    server = await asyncio.start_server(
        lambda r, w: _serve(allowed, domains, r, w), host, int(port), limit=HEADER_LIMIT
    )
    names = ", ".join(str(s.getsockname()) for s in server.sockets)
    print(f"connect_proxy: listening on {names}, targets in {allowed}, names {domains}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> int:
    try:
        asyncio.run(
            serve(
                os.environ.get("LISTEN", "0.0.0.0:3128"),
                os.environ["ALLOW_CIDR"],
                os.environ.get("ALLOW_DOMAINS", ""),
            )
        )
    except KeyError:
        print("connect_proxy: set ALLOW_CIDR (e.g. 10.244.0.0/16,10.96.0.0/16)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
