"""``popbroker``: one command, one subcommand per role (DESIGN §3).

    popbroker store --data-dir DIR --socket PATH [--listen HOST:PORT] [--flush-mode sync|async]
    popbroker demo  [--data-dir DIR]
    popbroker popack --store-socket PATH --listen HOST:PORT [--advertise HOST:PORT]
    popbroker revive --store-socket PATH
    popbroker all    --data-dir DIR --listen HOST:PORT [--admin-listen HOST:PORT] [--cluster NAME]
                     [--broker-name NAME] [--flush-mode sync|async]

``store`` serves the store API on a Unix socket in the pod's shared volume (the
``popack`` and ``revive`` roles connect there). ``demo`` is what ``make demo``
runs today: a store process on a scratch directory, sample traffic through the
wire API, a dump of what landed, then it keeps serving until interrupted. The
client-facing roles live in ``popbroker.grpc.rolemain``: ``popack`` serves the
RocketMQ v2 endpoint against a store role, ``revive`` redelivers against it, and
``all`` runs the three roles in one process on an in-process store.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="popbroker", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "role", choices=["store", "demo", "popack", "revive", "all"], help="what to run"
    )
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if args else 2
    role, rest = args[0], args[1:]
    if role == "store":
        from popbroker.admin import storerole  # noqa: PLC0415 - only the store role serves admin

        return storerole.main(rest)
    if role in ("popack", "revive", "all"):
        from popbroker.grpc import rolemain  # noqa: PLC0415 - only these roles need grpc servers

        return rolemain.main(role, rest)
    if role != "demo":
        parser.error(f"unknown role {role!r}")  # exits
    from popbroker import demo  # noqa: PLC0415 - only the demo needs it

    return demo.main(rest)


if __name__ == "__main__":
    sys.exit(main())
