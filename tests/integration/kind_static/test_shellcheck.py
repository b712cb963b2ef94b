"""Every shell script in the repository passes shellcheck (installed by `make shellcheck`).

Scripts are the tracked and not-ignored files named ``*.sh``/``*.bash`` or starting with a
``sh``/``bash`` shebang (so ``.ci/run`` counts). A missing shellcheck fails the test.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from tests.integration.kind_static.conftest import REPO

SHEBANG = re.compile(rb"^#!\s*/(usr/)?bin/(env\s+)?(ba|da)?sh\b")


def shell_scripts() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO, capture_output=True, check=True, timeout=60,
    ).stdout.decode().split("\0")  # fmt: skip
    found = []
    for name in filter(None, listed):
        path = REPO / name
        if not path.is_file():
            continue  # deleted in the worktree
        if name.endswith((".sh", ".bash")):
            found.append(name)
            continue
        with path.open("rb") as head:
            if SHEBANG.match(head.readline(80)):
                found.append(name)
    return sorted(found)


def test_the_scripts_we_know_of_are_found() -> None:
    scripts = shell_scripts()
    assert {".ci/run", "e2e/kind/run.sh", "tools/k8s/build.sh"} <= set(scripts), scripts


def test_every_shell_script_passes_shellcheck() -> None:
    binary = shutil.which("shellcheck")
    assert binary, "shellcheck is not installed: run `make shellcheck` (a make test prerequisite)"
    done = subprocess.run(
        [binary, "--external-sources", *shell_scripts()],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
