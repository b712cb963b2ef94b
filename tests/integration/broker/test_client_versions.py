"""Both official client versions start and work: 5.1.2 (this venv) and 5.1.1 (a side venv).

5.1.1 waits in ``startup()`` with no timeout for a Telemetry settings reply
with status OK (fact sheet §1.1), so this test fails by its timeout if the
endpoint ever stops answering settings. The 5.1.1 interpreter is
``$POPFLEET_ROCKETMQ_511_PYTHON`` or ``~/.cache/popfleet/rocketmq-5.1.1/bin/python``
(``python -m venv ~/.cache/popfleet/rocketmq-5.1.1 && .../pip install
rocketmq-python-client==5.1.1``, done by ``make client-5.1.1``, a prerequisite of
``make test``); the test fails when it is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.broker.conftest import GROUP, TOPIC
from tests.integration.broker.harness import BrokerProcess

PROBE = Path(__file__).with_name("client_version_probe.py")
PYTHON_511 = Path(
    os.environ.get(
        "POPFLEET_ROCKETMQ_511_PYTHON",
        Path.home() / ".cache" / "popfleet" / "rocketmq-5.1.1" / "bin" / "python",
    )
)


def _probe(python: Path | str, broker: BrokerProcess) -> dict[str, object]:
    done = subprocess.run(
        [str(python), str(PROBE), broker.endpoint, TOPIC, GROUP],
        capture_output=True,
        timeout=60,
        check=False,
        cwd=PROBE.parent,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    result: dict[str, object] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("version", "python"),
    [("5.1.2", sys.executable), ("5.1.1", PYTHON_511)],
    ids=["5.1.2", "5.1.1"],
)
def test_client_version_starts_sends_and_receives(
    broker: BrokerProcess, version: str, python: Path | str
) -> None:
    if not Path(python).exists():
        pytest.fail(
            f"no interpreter with rocketmq-python-client {version} at {python}; "
            "`make client-5.1.1` (a prerequisite of `make test`) creates it"
        )
    result = _probe(python, broker)
    assert result["version"] == version
    assert result["received"] == [result["sent"]]
    assert result["attempt"] == [1]
