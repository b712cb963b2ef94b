"""Apache RocketMQ 5.3.3 as a peer: Maven Central jars, a name server and a local-mode proxy.

Where it comes from: the artifacts ``org.apache.rocketmq:rocketmq-{proxy,namesrv,
broker,tools}:5.3.3`` and their runtime dependency closure, resolved by Maven
(``mvn dependency:copy-dependencies`` on a generated pom) into
``~/.cache/popfleet/rocketmq-<version>/lib``, keyed by version; a ``.complete``
stamp is written only after every jar is in place. ``java`` (>= 17) and ``mvn``
come from ``PATH``, else from Debian (``openjdk-17-jre-headless``, ``maven``)
when we are root, as the other peers' packages; anything missing fails loudly.

How it runs (:func:`start`), every process stopped by its PID:

1. a private network namespace that has only loopback: the name server is started
   as ``unshare --net sh -c 'ip link set lo up && exec java ... NamesrvStartup'``,
   so its PID is the namespace's anchor. The proxy's gRPC and remoting servers
   and the broker's HA port bind the wildcard address (not configurable in
   5.3.3); inside this namespace that is loopback only, and nothing in it can
   dial out. Every port is free there, so the defaults are used: name server
   9876, broker 10911 (fast channel 10909, HA 10912), proxy gRPC 8081, proxy
   remoting 8080. Ready when its log says "boot success".
2. ``nsenter --net=/proc/<namesrv pid>/ns/net java ... ProxyStartup -pm local``:
   the proxy with the broker embedded (local mode); broker and name server listen
   on 127.0.0.1 (``bindAddress``), ``brokerIP1`` is 127.0.0.1, so routes name
   127.0.0.1:8081; async flush (the broker's default, like the other peers);
   data and logs (``user.home``) in the work dir; metrics off; gRPC shutdown
   grace 1 s. Heap: name server 256 MiB, proxy + broker 1 GiB. Ready when its
   log says "startup successfully".
3. topics (4 queues, ``message.type`` NORMAL) and consumer groups through
   RocketMQ's admin tool, one JVM each for ``mqadmin updateTopicList`` and
   ``updateSubGroupList`` (batch files, sent straight to the broker, which
   registers them with the name server before it answers).

Clients reach it by entering the same namespace (``nsenter --net``), which the
returned :class:`~bench.peers.procs.ServerSet` names in ``netns_pid``.

Facts the load generator honours: a client's Telemetry settings must reach the
proxy before it receives; a batch SendMessage is answered with one entry; the
invisible time of a receive is at least 10 s; long polling is clamped to 5-20 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from bench.peers import procs

VERSION = "5.3.3"
ARTIFACTS = ("rocketmq-proxy", "rocketmq-namesrv", "rocketmq-broker", "rocketmq-tools")
CACHE = Path.home() / ".cache" / "popfleet"
ROOT = Path(__file__).resolve().parents[2]
MAVEN_TIMEOUT_S = 900.0
ADMIN_TIMEOUT_S = 120.0
APT_TIMEOUT_S = 600.0
NAMESRV = "127.0.0.1:9876"
BROKER = "127.0.0.1:10911"
GRPC_PORT = 8081
QUEUES = 4


class RocketMQUnavailable(RuntimeError):
    """A jar, java, mvn or the network namespace is missing."""


# -- jars ------------------------------------------------------------------------------------


def cache_dir(version: str = VERSION, *, cache: Path = CACHE) -> Path:
    return cache / f"rocketmq-{version}"


def pom_xml(version: str = VERSION) -> str:
    """A pom whose only purpose is to name the artifacts whose closure we copy."""
    deps = "".join(
        f"    <dependency><groupId>org.apache.rocketmq</groupId><artifactId>{a}</artifactId>"
        f"<version>{version}</version></dependency>\n"
        for a in ARTIFACTS
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>popfleet.bench</groupId>\n"
        f"  <artifactId>rocketmq-peer</artifactId>\n  <version>{version}</version>\n"
        "  <packaging>pom</packaging>\n"
        f"  <dependencies>\n{deps}  </dependencies>\n"
        "</project>\n"
    )


def ensure_jars(version: str = VERSION, *, cache: Path = CACHE) -> Path:
    """The lib dir with every jar, resolved by Maven once per version (module doc)."""
    home = cache_dir(version, cache=cache)
    lib = home / "lib"
    stamp = home / ".complete"
    if stamp.is_file() and lib.is_dir():
        return lib
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(pom_xml(version))
    staging = home / "lib.partial"
    shutil.rmtree(staging, ignore_errors=True)
    argv = [
        tool("mvn", "maven"), "-B", "-q", "-f", str(home / "pom.xml"),
        "dependency:copy-dependencies", "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]  # fmt: skip
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise RocketMQUnavailable(f"Maven timed out after {MAVEN_TIMEOUT_S} s") from exc
    missing = [a for a in ARTIFACTS if not (staging / f"{a}-{version}.jar").is_file()]
    if out.returncode != 0 or missing:
        raise RocketMQUnavailable(
            f"{' '.join(argv)} failed ({out.returncode}); missing {missing}:\n"
            f"{(out.stdout + out.stderr)[-3000:]}"
        )
    shutil.rmtree(lib, ignore_errors=True)
    staging.replace(lib)
    stamp.write_text(f"{version}\n")
    return lib


def tool(name: str, package: str) -> str:
    """``name`` on PATH, else installed from Debian's ``package`` when we are root."""
    found = shutil.which(name)
    if found:
        return found
    install = [str(ROOT / "scripts" / "apt-install.sh"), package]
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RocketMQUnavailable(f"{name} is missing; install it with: {' '.join(install)}")
    out = subprocess.run(
        install, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False
    )
    found = shutil.which(name)
    if out.returncode != 0 or not found:
        raise RocketMQUnavailable(f"{' '.join(install)} failed:\n{out.stderr[-2000:]}")
    return found


# -- configuration (pure) ---------------------------------------------------------------------


def namesrv_conf() -> str:
    host, port = NAMESRV.split(":")
    return f"listenPort={port}\nbindAddress={host}\n"


def broker_conf(store_dir: Path) -> str:
    host, port = BROKER.split(":")
    lines = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": "0",
        "brokerIP1": host,
        "bindAddress": host,
        "listenPort": port,
        "namesrvAddr": NAMESRV,
        "storePathRootDir": str(store_dir),
        "storePathCommitLog": str(store_dir / "commitlog"),
        "flushDiskType": "ASYNC_FLUSH",
        "autoCreateTopicEnable": "false",
    }
    return "".join(f"{key}={value}\n" for key, value in lines.items())


def proxy_json() -> str:
    return json.dumps(
        {
            "rocketMQClusterName": "DefaultCluster",
            "proxyMode": "local",
            "namesrvAddr": NAMESRV,
            "grpcServerPort": GRPC_PORT,
            "remotingListenPort": 8080,
            "metricCollectorMode": "off",
            "enablePrintJstack": False,
            "grpcShutdownTimeSeconds": 1,
        },
        indent=2,
    )


def topics_json(topics: Sequence[str]) -> str:
    return json.dumps(
        [
            {
                "topicName": name,
                "readQueueNums": QUEUES,
                "writeQueueNums": QUEUES,
                "perm": 6,  # read + write
                "attributes": {"+message.type": "NORMAL"},
            }
            for name in topics
        ]
    )


def groups_json(groups: Sequence[str]) -> str:
    return json.dumps([{"groupName": name} for name in groups])


# -- processes --------------------------------------------------------------------------------


def _java_argv(java: str, lib: Path, work_dir: Path, heap: str, main: str) -> list[str]:
    return [
        java, f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:-UsePerfData",
        f"-Duser.home={work_dir / 'home'}", "-cp", f"{lib}/*", main,
    ]  # fmt: skip


def _logged(work_dir: Path, name: str, text: str) -> bool:
    try:
        return text in (work_dir / f"{name}.log").read_text(errors="replace")
    except OSError:
        return False


def start(
    work_dir: Path, *, lib: Path, topics: Sequence[str], groups: Sequence[str]
) -> procs.ServerSet:
    """Name server + proxy (broker embedded) in a private network namespace (module doc)."""
    java = tool("java", "openjdk-17-jre-headless")
    for needed in ("unshare", "nsenter", "ip"):
        if shutil.which(needed) is None:
            raise RocketMQUnavailable(f"{needed} is missing (util-linux / iproute2)")
    (work_dir / "home").mkdir(parents=True, exist_ok=True)
    (work_dir / "namesrv.conf").write_text(namesrv_conf())
    (work_dir / "broker.conf").write_text(broker_conf(work_dir / "store"))
    (work_dir / "proxy.json").write_text(proxy_json())
    env = {**os.environ, "ROCKETMQ_HOME": str(work_dir / "home")}
    env["RMQ_PROXY_HOME"] = env["ROCKETMQ_HOME"]

    namesrv_argv = [
        "unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
        *_java_argv(java, lib, work_dir, "256m", "org.apache.rocketmq.namesrv.NamesrvStartup"),
        "-c", str(work_dir / "namesrv.conf"),
    ]  # fmt: skip
    namesrv = procs.start(
        "rocketmq-namesrv",
        namesrv_argv,
        work_dir=work_dir,
        port=int(NAMESRV.split(":")[1]),
        ready=lambda _port: _logged(work_dir, "rocketmq-namesrv", "boot success"),
        ready_timeout_s=60.0,
        env=env,
    )
    started = [namesrv]
    try:
        enter = ["nsenter", f"--net=/proc/{namesrv.pid}/ns/net", "--"]
        proxy_argv = [
            *enter,
            *_java_argv(java, lib, work_dir, "1g", "org.apache.rocketmq.proxy.ProxyStartup"),
            "-pm", "local",
            "-pc", str(work_dir / "proxy.json"),
            "-bc", str(work_dir / "broker.conf"),
        ]  # fmt: skip
        started.append(
            procs.start(
                "rocketmq-proxy",
                proxy_argv,
                work_dir=work_dir,
                port=GRPC_PORT,
                ready=lambda _port: _logged(work_dir, "rocketmq-proxy", "startup successfully"),
                ready_timeout_s=120.0,
                env=env,
            )
        )
        admin = [*enter, java, "-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData"]
        admin += [f"-Duser.home={work_dir / 'home'}", "-cp", f"{lib}/*"]
        admin += ["org.apache.rocketmq.tools.command.MQAdminStartup"]
        (work_dir / "topics.json").write_text(topics_json(topics))
        (work_dir / "groups.json").write_text(groups_json(groups))
        for command, path in (
            ("updateTopicList", "topics.json"),
            ("updateSubGroupList", "groups.json"),
        ):
            args = [command, "-b", BROKER, "-n", NAMESRV, "-f", str(work_dir / path)]
            _mqadmin(admin, args, env)
    except BaseException:
        for server in reversed(started):
            server.stop()
        raise
    return procs.ServerSet(
        name="rocketmq",
        endpoint=f"127.0.0.1:{GRPC_PORT}",
        processes=started,
        netns_pid=namesrv.pid,
    )


def _mqadmin(admin: list[str], args: list[str], env: dict[str, str]) -> None:
    out = subprocess.run(
        [*admin, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=ADMIN_TIMEOUT_S,
        check=False,
    )
    if out.returncode != 0 or "success" not in out.stdout:
        raise RocketMQUnavailable(
            f"mqadmin {args[0]} failed ({out.returncode}):\n{(out.stdout + out.stderr)[-2000:]}"
        )


if __name__ == "__main__":  # `make peer-rocketmq`: fetch (or find) the jars and say where
    print(ensure_jars())
