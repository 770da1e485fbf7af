# One image per service from one Dockerfile, for those with a Docker engine:
#   docker build --build-arg SERVICE=registry -t switchyard/registry .
# `make images` builds the same images without one (hack/images): a static
# binary (CGO off) at /usr/local/bin/service, the entrypoint, on an empty base
# with a CA bundle, running as the non-root user 65532. The binary probes its
# own service for health checks: `service healthcheck`.
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION} AS build
ARG SERVICE
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN test -n "${SERVICE}" || (echo "build with --build-arg SERVICE=<registry|eventbus|router|frontend|mocker|adapter>" && false)
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/switchyard-llm/switchyard/pkg/cli.version=${VERSION}" \
      -o /out/service ./services/${SERVICE}/cmd/${SERVICE}

FROM gcr.io/distroless/static-debian12:nonroot
ARG SERVICE
ARG VERSION=dev
LABEL org.opencontainers.image.title="switchyard-${SERVICE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/switchyard-llm/switchyard"
COPY --from=build /out/service /usr/local/bin/service
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/service"]
