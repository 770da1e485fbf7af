# One image per service from one Dockerfile, for those with a Docker engine:
#   docker build --build-arg SERVICE=registry -t switchyard/registry:0.1.0 .
# `make images` builds the same images without one (hack/images), and this
# file's build stage runs the same program to write the image's files, so
# both give one layout: a static binary (CGO off) at /usr/local/bin/service,
# the entrypoint, on an empty base with a CA bundle, /etc/passwd and
# /etc/group naming the non-root user 65532 it runs as, its home and a /tmp.
# The version defaults to the chart's appVersion, as with `make images`. The
# binary probes its own service for health checks: `service healthcheck`.
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION} AS build
ARG SERVICE
ARG VERSION=
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN test -n "${SERVICE}" || (echo "build with --build-arg SERVICE=<registry|eventbus|router|frontend|mocker|adapter>" && false)
RUN go run ./hack/images -rootfs /rootfs -services "${SERVICE}" -version "${VERSION}"

FROM scratch
ARG SERVICE
LABEL org.opencontainers.image.title="switchyard-${SERVICE}" \
      org.opencontainers.image.source="https://github.com/switchyard-llm/switchyard"
COPY --from=build /rootfs/ /
COPY --from=build --chown=65532:65532 /rootfs/home/nonroot/ /home/nonroot/
# The configuration hack/images gives its images (TestDockerfileMatchesImages).
ENV PATH=/usr/local/bin:/usr/bin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/local/bin/service"]
