"""The audit image's entry point turns Spark's driver/executor pod contract into a process."""

from __future__ import annotations

from pathlib import Path

import pytest

from popfleet_audit import podentry

HOME = {"SPARK_HOME": "/opt/spark", "JAVA_HOME": "/usr/lib/jvm/java-17"}
EXECUTOR_ENV = {
    **HOME,
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.244.0.7:7078",
    "SPARK_EXECUTOR_ID": "2",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_APPLICATION_ID": "spark-app-1",
    "SPARK_EXECUTOR_POD_IP": "10.244.0.9",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "audit-1-exec-2",
    "SPARK_EXECUTOR_MEMORY": "512m",
    "SPARK_CONF_DIR": "/opt/spark/conf",
    "SPARK_JAVA_OPT_10": "-Dspark.driver.port=7078",
    "SPARK_JAVA_OPT_2": "-Dspark.app.id=spark-app-1",
    "SPARK_JAVA_OPT_0": "-Djava.net.preferIPv6Addresses=false",
}


def test_the_driver_role_submits_in_client_mode_bound_to_the_pod_ip() -> None:
    args = ["driver", "--properties-file", "/opt/spark/conf/spark.properties", "--class",
            "org.apache.spark.deploy.PythonRunner", "local:///app/main.py", "all"]  # fmt: skip
    env = {**HOME, "SPARK_DRIVER_BIND_ADDRESS": "10.244.0.7"}
    assert podentry.command(args, env) == [
        "/opt/spark/bin/spark-submit",
        "--conf",
        "spark.driver.bindAddress=10.244.0.7",
        "--deploy-mode",
        "client",
        *args[1:],
    ]


def test_the_executor_role_starts_the_kubernetes_executor_backend() -> None:
    process = podentry.command(["executor"], EXECUTOR_ENV)
    assert process[0] == "/usr/lib/jvm/java-17/bin/java"
    # JVM options in the numeric order of their suffix (0, 2, 10), not the text order
    assert process[1:4] == [
        "-Djava.net.preferIPv6Addresses=false",
        "-Dspark.app.id=spark-app-1",
        "-Dspark.driver.port=7078",
    ]
    assert process[4:8] == ["-Xms512m", "-Xmx512m", "-cp", "/opt/spark/conf:/opt/spark/jars/*"]
    assert process[8] == podentry.EXECUTOR_CLASS
    flags = dict(zip(process[9::2], process[10::2], strict=True))
    assert flags == {
        "--driver-url": "spark://CoarseGrainedScheduler@10.244.0.7:7078",
        "--executor-id": "2",
        "--cores": "1",
        "--app-id": "spark-app-1",
        "--hostname": "10.244.0.9",
        "--resourceProfileId": "0",
        "--podName": "audit-1-exec-2",
    }


def test_extra_class_path_entries_follow_the_jars() -> None:
    env = {**EXECUTOR_ENV, "SPARK_EXTRA_CLASSPATH": "/x.jar", "SPARK_DIST_CLASSPATH": "/y/*"}
    process = podentry.command(["executor"], env)
    assert process[process.index("-cp") + 1] == "/opt/spark/conf:/opt/spark/jars/*:/x.jar:/y/*"


@pytest.mark.parametrize("missing", [name for _, name in podentry.EXECUTOR_FLAGS])
def test_an_executor_without_a_contract_variable_is_refused_with_its_name(missing: str) -> None:
    env = {k: v for k, v in EXECUTOR_ENV.items() if k != missing}
    with pytest.raises(podentry.ContractError, match=missing):
        podentry.command(["executor"], env)


def test_a_driver_without_its_bind_address_is_refused() -> None:
    with pytest.raises(podentry.ContractError, match="SPARK_DRIVER_BIND_ADDRESS"):
        podentry.command(["driver", "local:///app/main.py"], HOME)


def test_other_commands_pass_through_and_no_role_is_an_error() -> None:
    assert podentry.command(["popfleet-audit", "all"], HOME) == ["popfleet-audit", "all"]
    with pytest.raises(podentry.ContractError):
        podentry.command([], HOME)


def test_without_spark_home_the_installed_pyspark_is_the_home() -> None:
    process = podentry.command(["driver", "x.py"], {"SPARK_DRIVER_BIND_ADDRESS": "1.2.3.4"})
    assert Path(process[0]).parts[-3:] == ("pyspark", "bin", "spark-submit")


def test_main_exits_2_and_says_why_when_the_pod_lacks_a_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(EXECUTOR_ENV):
        monkeypatch.delenv(name, raising=False)
    assert podentry.main(["executor"]) == 2
    assert "SPARK_EXECUTOR_MEMORY" in capsys.readouterr().err
