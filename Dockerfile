# One image per service from one Dockerfile:
#   docker build --build-arg SERVICE=registry -t switchyard/registry .
# Multi-stage: a static binary (CGO off) on a distroless base, running as a
# non-root user. grpc-health-probe is included for health checks.
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION} AS build
ARG SERVICE
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN test -n "${SERVICE}" || (echo "build with --build-arg SERVICE=<registry|eventbus|router|frontend|mocker>" && false)
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/service ./services/${SERVICE}/cmd/${SERVICE}
RUN CGO_ENABLED=0 GOBIN=/out go install github.com/grpc-ecosystem/grpc-health-probe@v0.4.62

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/service /usr/local/bin/service
COPY --from=build /out/grpc-health-probe /usr/local/bin/grpc-health-probe
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/service"]
