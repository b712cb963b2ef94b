"""Dead-code check for `make lint`: vulture over what ships, with a reviewed whitelist.

    python tools/deadcode.py

Two corpora, because "used" means different things for them:

1. **What ships** (the broker, the API package, the operator, the audit jobs): scanned
   without the tests, so a function that only tests call is reported. That is the drift the
   2026-11-25 review found: a tested pure function that production bypasses looks alive to
   any check that reads the tests too.
2. **Test support** (the testbed package and ``popfleet_api.testing``): scanned together
   with the tests and e2e code that are their only users; only findings inside the
   test-support files are reported.

Framework callbacks (gRPC servicer methods, kopf settings, ``http.server`` hooks, fields of
documents that are serialised as a whole) are named in ``tools/vulture_whitelist.py``, each
with the reason. Exit status 1 when anything is reported.
"""

from __future__ import annotations

import sys
from pathlib import Path

import vulture

ROOT = Path(__file__).resolve().parent.parent
WHITELIST = ROOT / "tools" / "vulture_whitelist.py"
GENERATED = ["*_pb2.py", "*_pb2_grpc.py", "*_pb2.pyi", "*_pb2_grpc.pyi"]
MIN_CONFIDENCE = 60

SHIPPED = ["broker_image/src", "api/src", "operator/src", "spark_operator_jobs/src"]
TEST_SUPPORT = ["e2e/testbed/src", "api/src/popfleet_api/testing.py"]
TEST_USERS = ["tests", "e2e", "bench"]


def unused(paths: list[str], *, exclude: list[str]) -> list[vulture.core.Item]:
    scanner = vulture.Vulture(ignore_decorators=["@kopf.*", "@pytest.fixture"])
    scanner.scavenge([str(ROOT / p) for p in paths] + [str(WHITELIST)], exclude=exclude)
    return list(scanner.get_unused_code(min_confidence=MIN_CONFIDENCE))


def main() -> int:
    test_support = [ROOT / p for p in TEST_SUPPORT]
    shipped = [
        item
        for item in unused(SHIPPED, exclude=[*GENERATED, "*/popfleet_api/testing.py"])
        if Path(item.filename) != WHITELIST
    ]
    supporting = [
        item
        for item in unused([*TEST_SUPPORT, *TEST_USERS], exclude=GENERATED)
        if any(Path(item.filename).is_relative_to(p) for p in test_support)
    ]
    findings = sorted(shipped + supporting, key=lambda i: (str(i.filename), i.first_lineno))
    for item in findings:
        where = Path(item.filename).relative_to(ROOT)
        print(f"{where}:{item.first_lineno}: {item.message} ({item.confidence}% confidence)")
    if findings:
        print(
            f"deadcode: {len(findings)} unused; delete them, or name a framework callback "
            f"in {WHITELIST.relative_to(ROOT)} with the reason",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
