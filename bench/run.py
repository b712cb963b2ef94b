"""``make bench``: run every benchmark module in turn; each writes its JSON under bench/results/.

Add a module to ``BENCHMARKS`` when it exists; each must expose ``main()`` and stop
by itself (bounded in count and time).
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = [
    "bench.store_throughput",
    "bench.store_wire",
    "bench.pop_peers",
    "bench.grpc_floor",
    "bench.pop_peers_loadgen",
    "bench.replication",
    "bench.operator_convergence",
    "bench.operator_scale",
    "bench.pull_vs_pop",
    "bench.audit_throughput",
]


def main() -> int:
    failed = []
    for name in BENCHMARKS:
        print(f"== {name}", flush=True)
        module = importlib.import_module(name)
        saved = sys.argv
        sys.argv = [name]
        try:
            module.main()
        except Exception as exc:  # noqa: BLE001 - report every benchmark, then fail
            print(f"{name} failed: {exc!r}", file=sys.stderr)
            failed.append(name)
        finally:
            sys.argv = saved
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
