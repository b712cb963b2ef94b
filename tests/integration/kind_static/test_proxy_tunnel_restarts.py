"""The e2e tunnel keeps its port-forward up (``proxy_tunnel.Tunnel``): ``kubectl
port-forward`` exits when its stream to the pod breaks, and every gRPC channel of the run
goes through its local port. A stand-in kubectl (a script of ours: the real one needs a
cluster) exits its first port-forward with kubectl's message; the tunnel restarts it on the
same local port and says why, and stops restarting once closed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.kind_static.conftest import load

proxy_tunnel = load("proxy_tunnel")

STAND_IN = """#!/bin/sh
echo "$*" >> "{calls}"
case "$1" in
  port-forward)
    case "$5" in
      :3128) echo "Forwarding from 127.0.0.1:45678 -> 3128"
             echo "error: lost connection to pod" >&2; exit 1 ;;
      *) echo "Forwarding from 127.0.0.1:${{5%%:*}} -> 3128"; exec sleep 60 ;;
    esac ;;
esac
exit 0
"""


def test_a_port_forward_that_exits_is_restarted_on_the_same_port_until_closed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = tmp_path / "calls"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(STAND_IN.format(calls=calls))
    kubectl.chmod(0o755)
    tunnel = proxy_tunnel.Tunnel(kubectl, tmp_path / "kubeconfig")
    port = tunnel._start_forward(":3128")
    assert port == 45678
    keeper = proxy_tunnel.threading.Thread(target=tunnel._keep_forwarding, args=(port,))
    keeper.start()
    deadline = time.monotonic() + 20
    while calls.read_text().count("port-forward") < 2:  # the restart, within a bound
        assert time.monotonic() < deadline, calls.read_text()
        time.sleep(0.05)
    forwards = [line for line in calls.read_text().splitlines() if line.startswith("port-forward")]
    assert forwards[1].endswith("pod/e2e-proxy 45678:3128")  # the same local port
    tunnel.close()  # terminates the running one: not restarted again
    keeper.join(timeout=20)
    assert not keeper.is_alive()
    assert calls.read_text().count("port-forward") == 2
    said = capsys.readouterr().err
    assert "exited (1: error: lost connection to pod); restart 1/20 on 127.0.0.1:45678" in said
