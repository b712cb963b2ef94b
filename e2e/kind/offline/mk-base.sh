#!/usr/bin/env bash
# The root of every offline image: a minimal Debian bookworm made with debootstrap from the
# mirror apt already uses, imported into Docker as $TAG (no registry involved).
#
#   mk-base.sh            # TAG default popfleet.local/debian:bookworm
#
# The rootfs is cached as a tarball under $CACHE (default ~/.cache/popfleet/offline), keyed by
# the suite and the host's extra CA certificates; the import is skipped when the image exists
# with the same key. The extra CAs (/usr/local/share/ca-certificates/*.crt: our HTTPS egress
# re-signs registry traffic) are trusted in this base only, so pip/apt over https work in
# image builds. The upstream path (pinned python/spark bases) never sees them.
set -euo pipefail
TAG=${TAG:-popfleet.local/debian:bookworm}
CACHE=${CACHE:-$HOME/.cache/popfleet/offline}
SUITE=bookworm
cas=$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null | sha256sum | cut -c1-12)
KEY="$SUITE-$cas"
TARBALL=$CACHE/debian-$KEY.tar.gz

if [ "$(docker image inspect -f '{{index .Config.Labels "popfleet.key"}}' "$TAG" 2>/dev/null)" = "$KEY" ]; then
  echo "base: $TAG up to date ($KEY)" >&2
  exit 0
fi
mkdir -p "$CACHE"
if [ ! -s "$TARBALL" ]; then
  MIRROR=$(sed -n 's/^URIs: *\(.*debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  if [ -z "$MIRROR" ]; then
    MIRROR=$(awk -v s="$SUITE" '$1=="deb" && $3==s {print $2; exit}' /etc/apt/sources.list)
  fi
  SECURITY=$(sed -n 's/^URIs: *\(.*debian-security\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  echo "base: debootstrap $SUITE from $MIRROR" >&2
  root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'rm -rf "$root"' EXIT
  nice -n 10 debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$root" "$MIRROR" >/dev/null
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
  fi
  {
    echo "deb $MIRROR $SUITE main"
    echo "deb $MIRROR $SUITE-updates main"
    if [ -n "$SECURITY" ]; then echo "deb $SECURITY $SUITE-security main"; fi
  } > "$root/etc/apt/sources.list"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -c . | pigz -1 > "$TARBALL.tmp"
  mv "$TARBALL.tmp" "$TARBALL"
fi
pigz -dc "$TARBALL" | docker import \
  -c 'CMD ["bash"]' -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c "LABEL popfleet.key=$KEY" - "$TAG" >/dev/null
echo "base: imported $TAG ($KEY)" >&2
