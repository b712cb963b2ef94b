# popfleet.local/spark:4.3.0-python3 — a stand-in for apache/spark:4.3.0-python3 (Docker Hub is
# unreachable): Debian bookworm + OpenJDK 17 JRE + python3, and Spark 4.3.0 as PyPI's pyspark
# wheel ships it (jars/, bin/spark-submit, ...) under /opt/spark. Same conventions as the
# official image: SPARK_HOME=/opt/spark, user spark uid/gid 185, WORKDIR /opt/spark/work-dir.
# NOT included: the official /opt/entrypoint.sh (SparkApplication driver/executor pods need
# it; the Job backend overrides the command and does not).
ARG BASE=popfleet.local/debian:bookworm
FROM ${BASE}
ARG SPARK_VERSION=4.3.0
ENV LANG=C.UTF-8 SPARK_HOME=/opt/spark JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
RUN set -eux; \
    apt-get update -q; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      openjdk-17-jre-headless python3 python3-venv procps tini; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin; \
    python3 -m venv /opt/spark-dist; \
    PIP_NO_CACHE_DIR=1 /opt/spark-dist/bin/pip install "pyspark==${SPARK_VERSION}"; \
    ln -s "$(/opt/spark-dist/bin/python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')" /opt/spark; \
    groupadd --system --gid 185 spark; \
    useradd --system --uid 185 --gid 185 --home-dir /opt/spark --no-create-home --shell /bin/bash spark; \
    mkdir -p /opt/spark-work-dir; chown 185:185 /opt/spark-work-dir; \
    ln -s /opt/spark-work-dir /opt/spark/work-dir; \
    /opt/spark/bin/spark-submit --version 2>&1 | grep -i version
ENV PATH=/opt/spark/bin:$PATH
WORKDIR /opt/spark/work-dir
USER 185
