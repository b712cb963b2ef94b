"""``popbroker``: one command, one subcommand per role (DESIGN §3).

    popbroker store  --data-dir DIR --socket PATH [--listen HOST:PORT] [--admin-listen HOST:PORT]
                     [--flush-mode sync|async] ...
    popbroker popack --store-socket PATH [--data-dir PATH] --listen HOST:PORT [--advertise ...] ...
    popbroker revive --store-socket PATH [--data-dir PATH] ...
    popbroker all    --data-dir DIR --listen HOST:PORT [--admin-listen HOST:PORT] [--cluster NAME]
                     [--broker-name NAME] [--flush-mode sync|async] ...
    popbroker demo   [--data-dir DIR]

Each role is composed in its own module of :mod:`popbroker.roles`, which has its
flags and its start/stop order: ``store`` (:mod:`~popbroker.roles.store`) serves
the store API on a Unix socket in the pod's shared volume and the admin API;
``popack`` (:mod:`~popbroker.roles.popack`) serves the RocketMQ v2 endpoint
against a store role; ``revive`` (:mod:`~popbroker.roles.revive`) redelivers
against it; ``all`` (:mod:`~popbroker.roles.all`) runs the three in one process
on an in-process store. ``demo`` (:mod:`~popbroker.roles.demo`) is the
store-only demo ``make demo-store`` runs: a store role on a scratch directory,
sample traffic through the wire API, a dump of what landed. (``make demo`` runs
the whole fleet on a local testbed instead: ``popfleet_e2e.demo``.)

This module imports only the role it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

ROLES = ("store", "popack", "revive", "all", "demo")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="popbroker", description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=ROLES, help="what to run")
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if args else 2
    role, rest = args[0], args[1:]
    if role not in ROLES:
        parser.error(f"unknown role {role!r}")  # exits
    if role == "store":
        from popbroker.roles import store  # noqa: PLC0415

        return store.main(rest)
    if role == "popack":
        from popbroker.roles import popack  # noqa: PLC0415

        return popack.main(rest)
    if role == "revive":
        from popbroker.roles import revive  # noqa: PLC0415

        return revive.main(rest)
    if role == "all":
        from popbroker.roles import all as all_roles  # noqa: PLC0415

        return all_roles.main(rest)
    from popbroker.roles import demo  # noqa: PLC0415

    return demo.main(rest)


if __name__ == "__main__":
    sys.exit(main())
