"""``popfleet-testbed``: build/locate binaries, bring a testbed up or down, run the kubelet.

Why: one entry point for ``make testbed-*``, for people at a shell and for the kubelet process
that ``up`` spawns (``popfleet-testbed kubelet --run-dir ...``). ``up`` prints
``export KUBECONFIG=<run>/pki/admin.kubeconfig`` as its last line so that
``eval "$(make -s testbed-up | tail -1)"`` works.

The run directory defaults to ``$POPFLEET_TESTBED_DIR`` or ``/tmp/popfleet-testbed``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from popfleet_testbed import binaries, controlplane, errors, kubelet

DEFAULT_RUN_DIR = Path(os.environ.get("POPFLEET_TESTBED_DIR", "/tmp/popfleet-testbed"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="popfleet-testbed", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("bin", help="build or reuse the binaries; print their directory")
    p_up = sub.add_parser("up", help="start a testbed; last line: export KUBECONFIG=...")
    p_down = sub.add_parser("down", help="stop the testbed and remove its run directory")
    p_down.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    p_status = sub.add_parser("status", help="exit 0 when every component is running")
    p_kubelet = sub.add_parser("kubelet", help="run the process kubelet (spawned by up)")
    for p in (p_up, p_down, p_status, p_kubelet):
        p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR)
    p_up.add_argument("--node-name", default=controlplane.DEFAULT_NODE)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "bin":
            print(binaries.locate().directory)
        elif args.cmd == "up":
            start = time.monotonic()
            run_dir = args.run_dir.resolve()
            if controlplane.running(run_dir) and (run_dir / "testbed.json").exists():
                info = controlplane.Info.load(run_dir)  # already up: say how to use it
            else:
                info = controlplane.up(run_dir, node_name=args.node_name)
            print(
                f"testbed up in {time.monotonic() - start:.1f}s: {info.server_url}, "
                f"node {info.node_name}, run dir {info.run_dir}",
                file=sys.stderr,
            )
            print(f"export PATH={info.bin_dir}:$PATH")
            print(f"export KUBECONFIG={info.layout.admin_kubeconfig}")
        elif args.cmd == "down":
            controlplane.down(args.run_dir.resolve(), remove=not args.keep)
        elif args.cmd == "status":
            return 0 if controlplane.running(args.run_dir.resolve()) else 1
        elif args.cmd == "kubelet":
            kubelet.main(args.run_dir.resolve())
    except errors.TestbedError as exc:
        print(f"popfleet-testbed {args.cmd}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
