"""``popfleet-admin``: the mqadmin equivalent, applied to several brokers at once.

    popfleet-admin --broker H:P [--broker H:P ...] [--token T] [--output table|json] COMMAND

    topic create NAME --queues N [--read-queues N] [--write-queues N] [--perm P] [--type T]
    topic list [--all]              topic delete NAME
    group create NAME [--max-reconsume N] [--fifo] [--disable]
                      [--retry exponential|customized] [--backoff-ms 1000,5000,...]
                      [--initial-backoff-ms MS] [--max-backoff-ms MS] [--multiplier X]
    group list                      group delete NAME
    group set-mode NAME --topic T --mode PULL|POP [--share N]
    group get-mode NAME [--topic T]
    offsets GROUP [--topic T ...]
    revive-stats
    info
    members set NAME=HOST:PORT ...  members get

Like ``mqadmin -c``, a command is applied to every ``--broker`` (their admin
ports), concurrently; each gets its own row(s) in the result table. A broker
that fails (unreachable, refused) does not stop the others: every broker is
tried, the failures are reported, and the exit status is 1. Exit status 2 is a
usage error. The token comes from ``--token``, ``--token-file`` or the
environment variable ``POPFLEET_ADMIN_TOKEN``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from popfleet_api import errors, models
from popfleet_api.client import DEFAULT_TIMEOUT_S, BrokerAdmin, BrokerAdminApi
from popfleet_api.cliformat import BrokerResult, Row, Section, render_json, render_table

TOKEN_ENV = "POPFLEET_ADMIN_TOKEN"  # noqa: S105 -- the variable's name, not a secret

Action = Callable[[BrokerAdminApi], Awaitable[list[Section]]]
ClientFactory = Callable[[str], BrokerAdminApi]


# ---------------------------------------------------------------- rows


def _topic_row(topic: models.Topic) -> Row:
    return {
        "topic": topic.name,
        "read_queues": topic.read_queue_nums,
        "write_queues": topic.write_queue_nums,
        "perm": topic.perm.value,
        "type": topic.message_type.value,
        "system": topic.system,
    }


def _group_row(group: models.Group) -> Row:
    policy = group.retry_policy
    if policy.kind is models.RetryKind.CUSTOMIZED:
        retry = "customized " + ",".join(str(ms) for ms in policy.customized_backoff_ms)
    else:
        retry = (
            f"exponential {policy.initial_backoff_ms}..{policy.max_backoff_ms} ms "
            f"x{policy.multiplier:g}"
        )
    return {
        "group": group.name,
        "max_reconsume": group.max_reconsume_times,
        "fifo": group.fifo,
        "consume_enable": group.consume_enable,
        "retry": retry,
    }


def _mode_row(mode: models.ConsumeModeSetting) -> Row:
    return {
        "group": mode.group,
        "topic": mode.topic,
        "mode": mode.mode.value,
        "share": mode.pop_share_queue_num,
        "explicit": mode.explicitly_set,
    }


def _offsets_row(queue: models.QueueOffsets, now_ms: int) -> Row:
    """Lag as the audit measures it (``QueueOffsets.lag_messages``): none, shown ``-``, on a
    queue the group never committed; ``oldest_store_ms`` is the broker's answer as is."""
    oldest = queue.oldest_unconsumed_store_time_ms
    lag_ms = None if oldest is None or queue.lag_messages is None else max(0, now_ms - oldest)
    return {
        "topic": queue.topic,
        "queue": queue.queue_id,
        "min": queue.min_queue_offset,
        "max": queue.max_queue_offset,
        "committed": queue.committed_queue_offset,
        "lag": queue.lag_messages,
        "lag_ms": lag_ms,
        "in_flight": queue.in_flight_messages,
        "oldest_store_ms": oldest,
    }


# ---------------------------------------------------------------- actions


def _action(args: argparse.Namespace) -> Action:
    """The coroutine to run against each broker for the parsed command."""
    command = (args.command, getattr(args, "subcommand", None))

    if command == ("topic", "create"):
        topic = models.Topic(
            name=args.name,
            read_queue_nums=args.queues if args.read_queues is None else args.read_queues,
            write_queue_nums=args.queues if args.write_queues is None else args.write_queues,
            perm=args.perm,
            message_type=models.MessageType(args.type),
        )

        async def put_topic(admin: BrokerAdminApi) -> list[Section]:
            result = await admin.put_topic(topic)
            return [Section("topics", [{**_topic_row(result.topic), "created": result.created}])]

        return put_topic
    if command == ("topic", "list"):

        async def list_topics(admin: BrokerAdminApi) -> list[Section]:
            topics = await admin.topics(include_system=args.all)
            return [Section("topics", [_topic_row(t) for t in topics])]

        return list_topics
    if command == ("topic", "delete"):

        async def delete_topic(admin: BrokerAdminApi) -> list[Section]:
            await admin.delete_topic(args.name)
            return [Section("topics", [{"topic": args.name, "deleted": True}])]

        return delete_topic
    if command == ("group", "create"):
        group = models.Group(
            name=args.name,
            max_reconsume_times=args.max_reconsume,
            retry_policy=_retry_policy(args),
            fifo=args.fifo,
            consume_enable=not args.disable,
        )

        async def put_group(admin: BrokerAdminApi) -> list[Section]:
            result = await admin.put_group(group)
            return [Section("groups", [{**_group_row(result.group), "created": result.created}])]

        return put_group
    if command == ("group", "list"):

        async def list_groups(admin: BrokerAdminApi) -> list[Section]:
            return [Section("groups", [_group_row(g) for g in await admin.groups()])]

        return list_groups
    if command == ("group", "delete"):

        async def delete_group(admin: BrokerAdminApi) -> list[Section]:
            await admin.delete_group(args.name)
            return [Section("groups", [{"group": args.name, "deleted": True}])]

        return delete_group
    if command == ("group", "set-mode"):
        mode = models.ConsumeMode(args.mode.upper())

        async def set_mode(admin: BrokerAdminApi) -> list[Section]:
            setting = await admin.set_consume_mode(
                args.name, args.topic, mode=mode, pop_share_queue_num=args.share
            )
            return [Section("modes", [_mode_row(setting)])]

        return set_mode
    if command == ("group", "get-mode"):

        async def get_mode(admin: BrokerAdminApi) -> list[Section]:
            if args.topic is not None:
                modes = [await admin.consume_mode(args.name, args.topic)]
            else:
                modes = await admin.consume_modes(args.name)
            return [Section("modes", [_mode_row(m) for m in modes])]

        return get_mode
    if command[0] == "offsets":

        async def offsets(admin: BrokerAdminApi) -> list[Section]:
            result = await admin.offsets(args.group, args.topic or ())
            rows = [_offsets_row(q, result.now_ms) for q in result.queues]
            return [Section("offsets", rows)]

        return offsets
    if command[0] == "revive-stats":
        return _revive_stats
    if command[0] == "info":
        return _info
    if command == ("members", "set"):
        members = [_member(text) for text in args.members]

        async def set_members(admin: BrokerAdminApi) -> list[Section]:
            stored = await admin.set_members(members)
            return [Section("members", [_member_row(m) for m in stored])]

        return set_members
    if command == ("members", "get"):

        async def get_members(admin: BrokerAdminApi) -> list[Section]:
            return [Section("members", [_member_row(m) for m in await admin.members()])]

        return get_members
    if command[0] == "hand-over":

        async def hand_over(admin: BrokerAdminApi) -> list[Section]:
            done = await admin.hand_over(args.successor or "", timeout_ms=args.timeout_ms)
            return [Section("hand-over", [{"successor": done.successor, "term": done.term}])]

        return hand_over
    raise AssertionError(f"unhandled command {command}")  # pragma: no cover - argparse refuses


async def _revive_stats(admin: BrokerAdminApi) -> list[Section]:
    stats = await admin.revive_stats()
    queues: list[Row] = [
        {
            "revive_queue": q.revive_queue_id,
            "min": q.min_queue_offset,
            "max": q.max_queue_offset,
            "revive_offset": q.revive_queue_offset,
            "lag": q.lag_messages,
            "lag_ms": q.lag_ms,
            "pending_cks": q.ledger.pending_checkpoints if q.ledger else None,
        }
        for q in stats.queues
    ]
    groups: list[Row] = [
        {"group": g.group, "retry": g.retry_messages, "dlq": g.dlq_messages} for g in stats.groups
    ]
    return [Section("revive queues", queues), Section("retry and DLQ", groups)]


async def _info(admin: BrokerAdminApi) -> list[Section]:
    info = await admin.info()
    row: Row = {
        "cluster": info.cluster,
        "broker_name": info.broker_name,
        "ready": info.ready,
        "version": info.version,
        "config_epoch": info.config_epoch,
        "client_endpoint": info.client_endpoint or None,
        "flush": info.flush_mode.value,
        "revive_queues": info.revive_queue_num,
    }
    if info.last_error:
        row["last_error"] = info.last_error
    return [Section("info", [row])]


def _member(text: str) -> models.Member:
    name, sep, endpoint = text.partition("=")
    if not sep or not name or not endpoint:
        raise argparse.ArgumentTypeError(f"member {text!r} is not NAME=HOST:PORT")
    return models.Member(broker_name=name, endpoint=endpoint)


def _member_row(member: models.Member) -> Row:
    return {"member": member.broker_name, "endpoint": member.endpoint}


def _retry_policy(args: argparse.Namespace) -> models.RetryPolicy:
    if args.retry == "customized" or args.backoff_ms:
        steps = tuple(int(s) for s in (args.backoff_ms or "").split(",") if s.strip())
        return models.RetryPolicy(kind=models.RetryKind.CUSTOMIZED, customized_backoff_ms=steps)
    base = models.RetryPolicy()
    return models.RetryPolicy(
        kind=models.RetryKind.EXPONENTIAL,
        initial_backoff_ms=(
            base.initial_backoff_ms if args.initial_backoff_ms is None else args.initial_backoff_ms
        ),
        max_backoff_ms=base.max_backoff_ms if args.max_backoff_ms is None else args.max_backoff_ms,
        multiplier=base.multiplier if args.multiplier is None else args.multiplier,
    )


# ---------------------------------------------------------------- parsing


def _permission(text: str) -> models.Permission:
    try:
        return models.Permission.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="popfleet-admin",
        description="Apply an admin command to one or more popfleet brokers (their admin ports).",
    )
    parser.add_argument(
        "--broker",
        action="append",
        required=True,
        metavar="HOST:PORT",
        help="a broker's admin endpoint; repeat for several",
    )
    parser.add_argument("--token", help=f"bearer token (default: ${TOKEN_ENV})")
    parser.add_argument("--token-file", type=Path, help="read the bearer token from this file")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per call (default 10)"
    )
    parser.add_argument("--output", choices=["table", "json"], default="table")
    commands = parser.add_subparsers(dest="command", required=True)

    topic = commands.add_parser("topic", help="topics").add_subparsers(
        dest="subcommand", required=True
    )
    create = topic.add_parser("create", help="create or update a topic (queues only grow)")
    create.add_argument("name")
    create.add_argument("--queues", type=int, required=True, help="read and write queue count")
    create.add_argument("--read-queues", type=int, help="read queue count (default: --queues)")
    create.add_argument("--write-queues", type=int, help="write queue count (default: --queues)")
    create.add_argument(
        "--perm", type=_permission, default=models.Permission.READ_WRITE, help="rw, r, w or none"
    )
    create.add_argument(
        "--type",
        type=str.upper,
        choices=[t.value for t in models.MessageType],
        default=models.MessageType.NORMAL.value,
    )
    listing = topic.add_parser("list", help="list topics")
    listing.add_argument("--all", action="store_true", help="include system topics")
    topic.add_parser("delete", help="delete a topic").add_argument("name")

    group = commands.add_parser("group", help="consumer groups").add_subparsers(
        dest="subcommand", required=True
    )
    gcreate = group.add_parser("create", help="create or update a group")
    gcreate.add_argument("name")
    gcreate.add_argument("--max-reconsume", type=int, default=16)
    gcreate.add_argument("--fifo", action="store_true")
    gcreate.add_argument("--disable", action="store_true", help="consume_enable = false")
    gcreate.add_argument("--retry", choices=["exponential", "customized"], default="exponential")
    gcreate.add_argument("--backoff-ms", help="customized back-offs, e.g. 1000,5000,30000")
    gcreate.add_argument("--initial-backoff-ms", type=int)
    gcreate.add_argument("--max-backoff-ms", type=int)
    gcreate.add_argument("--multiplier", type=float)
    group.add_parser("list", help="list groups")
    group.add_parser("delete", help="delete a group").add_argument("name")
    set_mode = group.add_parser("set-mode", help="set PULL or POP for (group, topic)")
    set_mode.add_argument("name")
    set_mode.add_argument("--topic", required=True)
    set_mode.add_argument("--mode", required=True, type=str.upper, choices=["PULL", "POP"])
    set_mode.add_argument("--share", type=int, default=0, help="popShareQueueNum (POP)")
    get_mode = group.add_parser("get-mode", help="the mode of (group, topic), or all of a group")
    get_mode.add_argument("name")
    get_mode.add_argument("--topic")

    offsets = commands.add_parser("offsets", help="a group's offsets, lag and in-flight counts")
    offsets.add_argument("group")
    offsets.add_argument("--topic", action="append", help="only these topics (repeatable)")
    commands.add_parser("revive-stats", help="revive progress and lag; retry and DLQ depths")
    commands.add_parser("info", help="broker identity, readiness and config epoch")

    members = commands.add_parser("members", help="cluster membership").add_subparsers(
        dest="subcommand", required=True
    )
    mset = members.add_parser("set", help="replace the member list")
    mset.add_argument("members", nargs="*", metavar="NAME=HOST:PORT")
    members.add_parser("get", help="show the member list")
    hand = commands.add_parser(
        "hand-over",
        help="a replicated set's leader hands over to an in-sync follower (writes stop, the "
        "follower catches up, it leads the next term)",
    )
    hand.add_argument("--successor", help="the successor's pod name (default: the furthest along)")
    hand.add_argument("--timeout-ms", type=int, default=0, help="the catch-up wait (0: 10 s)")
    return parser


def _token(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    if args.token:
        return str(args.token)
    if args.token_file is not None:
        try:
            return args.token_file.read_text().strip() or None
        except OSError as exc:
            parser.error(f"--token-file: {exc}")
    return os.environ.get(TOKEN_ENV) or None


# ---------------------------------------------------------------- running


async def run(
    brokers: Sequence[str], action: Action, *, client_factory: ClientFactory
) -> list[BrokerResult]:
    """Apply ``action`` to every broker concurrently; one result per broker, in order."""

    async def one(target: str) -> BrokerResult:
        admin = client_factory(target)
        try:
            return BrokerResult(target, sections=await action(admin))
        except errors.AdminError as exc:
            return BrokerResult(target, error=exc)
        finally:
            await admin.close()

    return list(await asyncio.gather(*(one(b) for b in brokers)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    try:
        action = _action(args)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        parser.error(str(exc))
    token = _token(args, parser)
    brokers = list(dict.fromkeys(args.broker))  # each broker once, in the order given

    def client_factory(target: str) -> BrokerAdminApi:
        return BrokerAdmin(target, token=token, timeout_s=args.timeout)

    results = asyncio.run(run(brokers, action, client_factory=client_factory))
    print(render_json(results) if args.output == "json" else render_table(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
