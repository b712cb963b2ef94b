"""A broker without replication never loads the Kubernetes client: its models cost a store
role ~70 MB and ~0.5 s at start (issue 18; measured with the roles' imports)."""

from __future__ import annotations

import subprocess
import sys


def test_the_roles_import_no_kubernetes_client() -> None:
    probe = (
        "import sys\n"
        "import popbroker.cli, popbroker.roles.store, popbroker.roles.popack\n"
        "import popbroker.roles.revive, popbroker.roles.all\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes_asyncio')\n"
        "print(len(loaded))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "0", out.stdout + out.stderr
