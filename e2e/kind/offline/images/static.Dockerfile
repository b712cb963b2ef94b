# popfleet.local/static:bookworm — a stand-in for gcr.io/distroless/static: passwd/group with root,
# nonroot (65532) and nobody, /tmp, CA bundle, nsswitch. Nothing executable.
ARG BASE=popfleet.local/debian:bookworm
FROM ${BASE} AS src
RUN set -eux; mkdir -p /out/etc/ssl/certs /out/tmp /out/home/nonroot /out/root; \
    chmod 1777 /out/tmp; chown 65532:65532 /out/home/nonroot; chmod 700 /out/root; \
    cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/; \
    printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
      'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
      'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > /out/etc/passwd; \
    printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' > /out/etc/group; \
    echo 'hosts: files dns' > /out/etc/nsswitch.conf
FROM scratch
COPY --from=src /out/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin
