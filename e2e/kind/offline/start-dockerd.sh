#!/usr/bin/env bash
# Make sure a Docker engine answers (`make docker-engine`, and the first stage of e2e-kind).
#
#   start-dockerd.sh
#
# * An engine that already answers `docker info` is used as it is (a normal Docker host:
#   nothing here changes it).
# * Otherwise, as root: Debian's docker.io (and debootstrap, iptables, pigz for the offline
#   images) is installed when dockerd is missing, and dockerd is started in the background
#   (machines without systemd, like ours and CI's): overlay2, cgroupfs, PID in $PIDFILE, log in
#   $LOG, under `nice -n $NICE` (default 10) so the kind node inherits a lower priority.
# * The capability-filtering runtime (runc-capfilter, beside this file, installed as
#   /usr/local/lib/popfleet/runc-capfilter) is registered as the default runtime ONLY when this machine's bounding set lacks a capability that
#   `docker run --privileged` asks for (ours lacks CAP_SYS_RESOURCE; kind needs --privileged).
#
# Stop it with `kill "$(cat /run/popfleet-dockerd.pid)"` (dockerd stops its containerd).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG=${LOG:-/var/log/popfleet-dockerd.log}
PIDFILE=${PIDFILE:-/run/popfleet-dockerd.pid}
# The runtime lives outside any checkout: dockerd outlives the clone that started it (CI
# runs each submission in a new clone), and a runtime path into a deleted clone fails every
# container with "fork/exec .../runc-capfilter: no such file or directory".
CAPFILTER=${CAPFILTER:-/usr/local/lib/popfleet/runc-capfilter}

# Bits 0..40 of the capability set `--privileged` asks for; any missing one needs the filter.
want=$(( (1 << 41) - 1 ))
have=$(( 16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status) ))
needs_filter=0
if (( (have & want) != want )); then needs_filter=1; fi
if [ "$needs_filter" = 1 ] && [ "$(id -u)" -eq 0 ]; then
  install -D -m 0755 "$here/runc-capfilter" "$CAPFILTER"   # keep the registered copy current
fi

if docker info >/dev/null 2>&1; then
  registered=$(docker info -f '{{range $name, $rt := .Runtimes}}{{if eq $name "popfleet-runc"}}{{$rt.Path}}{{end}}{{end}}' 2>/dev/null || true)
  if [ -z "$registered" ] || [ -x "$registered" ]; then
    echo "docker engine: already running ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
    exit 0
  fi
  # Ours, started by an older version of this script with a runtime path that is gone.
  if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "docker engine: restarting our dockerd (its runtime $registered is gone)" >&2
    pid=$(cat "$PIDFILE")
    kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  else
    echo "docker engine: the running engine's runtime popfleet-runc ($registered) is missing" >&2
    exit 1
  fi
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "docker engine: none answers and starting one needs root" >&2
  exit 1
fi
if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "docker engine: pid $(cat "$PIDFILE") is alive but does not answer; see $LOG" >&2
  exit 1
fi
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  # scripts/apt-install.sh starts no service from the packages (ours is started below).
  "$here/../../../scripts/apt-install.sh" docker.io debootstrap iptables pigz xz-utils
fi
runtime=()
if [ "$needs_filter" = 1 ]; then
  echo "docker engine: bounding set $(printf '%x' "$have") lacks capabilities; using $CAPFILTER" >&2
  runtime=(--add-runtime "popfleet-runc=$CAPFILTER" --default-runtime popfleet-runc)
fi
# The VM boots with ip_forward=0; the bridge network's NAT needs it.
sysctl -q -w net.ipv4.ip_forward=1
setsid nohup nice -n "${NICE:-10}" dockerd --storage-driver=overlay2 \
  --exec-opt native.cgroupdriver=cgroupfs "${runtime[@]}" --pidfile "$PIDFILE" \
  >>"$LOG" 2>&1 </dev/null &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "docker engine: dockerd $(docker version -f '{{.Server.Version}}') up, pid $(cat "$PIDFILE"), log $LOG"
    exit 0
  fi
  sleep 1
done
echo "docker engine: dockerd did not answer in 60 s; tail of $LOG:" >&2
tail -30 "$LOG" >&2
exit 1
