# popfleet.local/python:3.11-slim-bookworm — a stand-in for python:3.11-slim-bookworm (Docker Hub is
# unreachable): Debian bookworm's python3.11 (3.11.2 + security fixes, not 3.11.14) with venv
# and pip, `python` on PATH. Same userland family (bookworm, glibc 2.36) as the official one.
ARG BASE=popfleet.local/debian:bookworm
FROM ${BASE}
ENV LANG=C.UTF-8
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
       python3 python3-venv python3-pip python-is-python3 \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && python --version
CMD ["python3"]
