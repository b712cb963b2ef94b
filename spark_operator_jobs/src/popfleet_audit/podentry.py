"""The audit image's entry point: Spark's Kubernetes container contract, ours.

Why: Spark's Kubernetes backend starts a driver pod (cluster mode, e.g. the SparkApplication
path) and executor pods (every ``k8s://`` master) with *our* image and expects its entry
point to turn a role argument plus environment variables into the right process. The
official Spark image does it with a shell script we do not ship (our image is Debian's JRE,
PyPI's pyspark and our package); this module is that contract, as Spark 4's
``spark-kubernetes`` (in the pyspark wheel) drives it:

* ``driver ARGS...`` (cluster mode; ARGS are spark-submit's: ``--properties-file ...
  --class org.apache.spark.deploy.PythonRunner local:///... app args``): run
  ``spark-submit --conf spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS --deploy-mode
  client ARGS`` (the driver pod runs the application in client mode; cluster mode there
  would submit again);
* ``executor`` (no ARGS): run the JVM's ``KubernetesExecutorBackend`` with
  ``--driver-url $SPARK_DRIVER_URL --executor-id $SPARK_EXECUTOR_ID --cores
  $SPARK_EXECUTOR_CORES --app-id $SPARK_APPLICATION_ID --hostname $SPARK_EXECUTOR_POD_IP
  --resourceProfileId $SPARK_RESOURCE_PROFILE_ID --podName $SPARK_EXECUTOR_POD_NAME``, the
  JVM options Spark passes as ``SPARK_JAVA_OPT_<n>`` in the order of ``n``, ``-Xms``/``-Xmx``
  ``$SPARK_EXECUTOR_MEMORY``, and the class path ``$SPARK_CONF_DIR`` (else
  ``$SPARK_HOME/conf``), ``$SPARK_HOME/jars/*``, ``$SPARK_EXTRA_CLASSPATH``,
  ``$SPARK_DIST_CLASSPATH``;
* anything else runs as given (``popfleet-audit ...``, ``spark-submit ...``: the Job backend
  sets the container's command itself and never reaches here).

Before either role starts the JVM, a UID without a passwd entry gets one through
``nss_wrapper`` (:mod:`popfleet_audit.identity`): the root filesystem is read-only.

:func:`command` is pure (argv and environment in, the process to exec out); :func:`main`
execs it. A missing variable is a clear error (exit 2), never a half-configured JVM.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

EXECUTOR_CLASS = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
EXECUTOR_FLAGS = (  # (flag, variable), in the order Spark's own image passes them
    ("--driver-url", "SPARK_DRIVER_URL"),
    ("--executor-id", "SPARK_EXECUTOR_ID"),
    ("--cores", "SPARK_EXECUTOR_CORES"),
    ("--app-id", "SPARK_APPLICATION_ID"),
    ("--hostname", "SPARK_EXECUTOR_POD_IP"),
    ("--resourceProfileId", "SPARK_RESOURCE_PROFILE_ID"),
    ("--podName", "SPARK_EXECUTOR_POD_NAME"),
)
_JAVA_OPT = re.compile(r"^SPARK_JAVA_OPT_(\d+)$")


class ContractError(ValueError):
    """The pod does not carry what its role needs; the message names it."""


def _need(env: Mapping[str, str], name: str, role: str) -> str:
    value = env.get(name, "")
    if not value:
        raise ContractError(f"{role}: ${name} is not set (Spark sets it on the pods it creates)")
    return value


def spark_home(env: Mapping[str, str]) -> Path:
    """``$SPARK_HOME``, else the installed pyspark package (what PyPI's wheel ships)."""
    if env.get("SPARK_HOME"):
        return Path(env["SPARK_HOME"])
    import pyspark  # noqa: PLC0415 - only when the image does not say

    return Path(pyspark.__file__).parent


def java_options(env: Mapping[str, str]) -> list[str]:
    """``SPARK_JAVA_OPT_<n>`` values in numeric order of ``n`` (0, 1, ..., 10, ...)."""
    found = [(int(m.group(1)), value) for key, value in env.items() if (m := _JAVA_OPT.match(key))]
    return [value for _, value in sorted(found)]


def class_path(env: Mapping[str, str], home: Path) -> str:
    conf = env.get("SPARK_CONF_DIR") or str(home / "conf")
    parts = [conf, str(home / "jars" / "*")]
    parts += [env[k] for k in ("SPARK_EXTRA_CLASSPATH", "SPARK_DIST_CLASSPATH") if env.get(k)]
    return ":".join(parts)


def java(env: Mapping[str, str]) -> str:
    return str(Path(env["JAVA_HOME"]) / "bin" / "java") if env.get("JAVA_HOME") else "java"


def command(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The process this container runs for ``argv`` (the container's args) and ``env``."""
    if not argv:
        raise ContractError("no role: want 'driver ARGS...', 'executor', or a command to run")
    role, rest = argv[0], list(argv[1:])
    home = spark_home(env)
    if role == "driver":
        bind = _need(env, "SPARK_DRIVER_BIND_ADDRESS", role)
        submit = str(home / "bin" / "spark-submit")
        return [submit, "--conf", f"spark.driver.bindAddress={bind}", "--deploy-mode", "client",
                *rest]  # fmt: skip
    if role == "executor":
        memory = _need(env, "SPARK_EXECUTOR_MEMORY", role)
        flags = [part for flag, name in EXECUTOR_FLAGS for part in (flag, _need(env, name, role))]
        return [
            java(env),
            *java_options(env),
            f"-Xms{memory}",
            f"-Xmx{memory}",
            "-cp",
            class_path(env, home),
            EXECUTOR_CLASS,
            *flags,
        ]
    return list(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Exec the role's process (never returns); 2 with the reason when the pod lacks what it
    needs."""
    from popfleet_audit import identity  # noqa: PLC0415 - keeps command() import-light

    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    try:
        process = command(args, env)
        identity.ensure_user_entry(env)  # the JVM asks the OS for this UID's name
    except (ContractError, identity.IdentityError) as exc:
        print(f"popfleet-spark-pod: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execvpe(process[0], process, env)  # noqa: S606 - the pod's own process, by contract


if __name__ == "__main__":
    sys.exit(main())
