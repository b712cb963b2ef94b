"""tools.gobuild: the cache key of a Go build, and popfront's command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import gobuild


def test_the_build_is_keyed_by_go_sum_and_every_source(tmp_path: Path) -> None:
    for name, text in {
        "go.mod": "module x\n",
        "go.sum": "a\n",
        "main.go": "package main\n",
    }.items():
        (tmp_path / name).write_text(text)
    module = gobuild.GoModule("loadgen", tmp_path)
    first = gobuild.source_digest(tmp_path)
    assert gobuild.binary_path(module, cache=tmp_path / "c").parent.name == f"loadgen-{first}"
    (tmp_path / "go.sum").write_text("b\n")
    second = gobuild.source_digest(tmp_path)
    (tmp_path / "extra.go").write_text("package main\n")
    assert len({first, second, gobuild.source_digest(tmp_path)}) == 3
    (tmp_path / "README").write_text("not a source")
    assert gobuild.source_digest(tmp_path) == gobuild.source_digest(tmp_path)


def test_a_cached_binary_is_reused_without_a_toolchain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "go.mod").write_text("module x\n")
    (tmp_path / "go.sum").write_text("")
    module = gobuild.GoModule("popfront", tmp_path)
    cached = gobuild.binary_path(module, cache=tmp_path / "c")
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"\x7fELF")

    def no_toolchain() -> str:
        raise AssertionError("a cached binary must not be rebuilt")

    monkeypatch.setattr(gobuild, "go_command", no_toolchain)
    assert gobuild.ensure_built(module, cache=tmp_path / "c") == cached


def test_popfront_argv_forwards_to_the_socket_with_tls_last(tmp_path: Path) -> None:
    argv = gobuild.front_argv(
        Path("/bin/popfront"),
        listen="127.0.0.1:0",
        socket_path=tmp_path / "popack.sock",
        port_file=tmp_path / "port",
        tls=("-tls-cert", "c.pem", "-tls-key", "k.pem"),
    )
    assert argv[0] == "/bin/popfront"
    assert argv[argv.index("-upstream") + 1] == f"unix://{tmp_path / 'popack.sock'}"
    assert argv[argv.index("-listen") + 1] == "127.0.0.1:0"
    assert argv[-4:] == ["-tls-cert", "c.pem", "-tls-key", "k.pem"]


def test_the_two_modules_are_the_ones_in_the_tree() -> None:
    for module in gobuild.MODULES.values():
        assert (module.source / "go.mod").is_file(), module


def test_popfront_argv_frames_on_by_default_and_off_on_request(tmp_path: Path) -> None:
    def argv(*, frames: bool) -> list[str]:
        return gobuild.front_argv(
            Path("/bin/popfront"),
            listen="127.0.0.1:0",
            socket_path=tmp_path / "popack.sock",
            port_file=tmp_path / "port",
            frames=frames,
        )

    assert "-frames" not in argv(frames=True)  # popfront's default: auto
    off = argv(frames=False)
    assert off[off.index("-frames") + 1] == "off"
