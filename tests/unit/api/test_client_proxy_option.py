"""``BrokerAdmin``'s ``proxy``: off (and deaf to the environment) unless named, refused if
gRPC could not use it (gRPC then dials the broker directly, the one thing a proxy is for
preventing). The calls through a real proxy are in tests/integration/kind_static."""

from __future__ import annotations

import pytest

from popfleet_api.client import channel_options


def test_no_proxy_turns_proxies_off() -> None:
    options = dict(channel_options(None))
    assert options["grpc.enable_http_proxy"] == 0
    assert "grpc.http_proxy" not in options


def test_a_proxy_is_a_channel_argument() -> None:
    options = dict(channel_options("http://127.0.0.1:3128"))
    assert options["grpc.http_proxy"] == "http://127.0.0.1:3128"
    assert options.get("grpc.enable_http_proxy", 1) != 0


@pytest.mark.parametrize(
    "proxy",
    ["", "127.0.0.1:3128", "https://127.0.0.1:3128", "http://127.0.0.1", "http://:3128",
     "http://127.0.0.1:99999", "http://127.0.0.1:3128/path", "socks5://127.0.0.1:1080"],
)  # fmt: skip
def test_proxies_grpc_cannot_use_are_refused(proxy: str) -> None:
    with pytest.raises(ValueError, match="is not http://HOST:PORT"):
        channel_options(proxy)
