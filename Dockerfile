# Image for the device plugin DaemonSet; it also carries the CNI binary, which
# an init container installs into the node's CNI bin directory, and kubectl-rdma.
# Built by `docker build .` where a Docker engine is available. CI here has none:
# e2e/local-node/images.sh builds an image with the same binaries and the same
# entrypoint, as an OCI layout tar, with hack/ocibuild (go-containerregistry), and
# `make release` the published one, linux/amd64 and linux/arm64 in one index
# (docs/release.md).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# `--version` of each binary: pass VERSION, COMMIT and DATE as the Makefile
# computes them (docker build --build-arg VERSION=$(git describe ...)); left
# empty, the binaries fall back to the VCS stamp of the build.
ARG VERSION= COMMIT= DATE=
ENV VFLAGS="-X github.com/kube-rdma/kube-rdma/internal/version.Version=${VERSION} -X github.com/kube-rdma/kube-rdma/internal/version.Commit=${COMMIT} -X github.com/kube-rdma/kube-rdma/internal/version.Date=${DATE}"
# Only the shipped binaries; the demo (cmd/kube-rdma-demo) stays out.
# Static and stripped: the final image has no libc, and the CNI binary's
# start-up is part of every pod's ADD and DEL. -tags grpcnotrace: as the
# Makefile's build (RELEASE_TAGS), gRPC without golang.org/x/net/trace.
RUN CGO_ENABLED=0 go build -tags grpcnotrace -trimpath -ldflags="-s -w $VFLAGS" -o /out/device-plugin ./cmd/device-plugin \
 && CGO_ENABLED=0 go build -tags grpcnotrace -trimpath -ldflags="-s -w $VFLAGS" -o /out/kube-rdma ./cmd/cni \
 && CGO_ENABLED=0 go build -tags grpcnotrace -trimpath -ldflags="-s -w $VFLAGS" -o /out/kubectl-rdma ./cmd/kubectl-rdma

FROM gcr.io/distroless/static-debian12:nonroot AS runtime
COPY --from=build /out/ /usr/local/bin/
# The daemon needs root on the node (kubelet socket dir, sysfs, netlink).
USER 0:0
ENTRYPOINT ["/usr/local/bin/device-plugin"]
CMD ["run"]
