# registry.k8s.io/coredns/coredns equivalent: /coredns on popfleet.local/static, ENTRYPOINT /coredns
# (kubeadm's Deployment passes only args). No USER: it runs as root, so binding :53 needs
# nothing beyond the NET_BIND_SERVICE the Deployment adds.
FROM popfleet.local/static:bookworm
COPY coredns /coredns
EXPOSE 53 53/udp
ENTRYPOINT ["/coredns"]
