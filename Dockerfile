# The allot binary for a real cluster (the Helm chart's image). Built with cgo: the agent
# reaches the node's NVIDIA driver library (libnvidia-ml.so.1, which the NVIDIA container
# runtime mounts in) through NVIDIA's go-nvml bindings. So the base has glibc; no shell,
# runs as non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -trimpath -ldflags "-s -w -X github.com/allot-dev/allot/internal/cli.Version=${VERSION}" -o /allot ./cmd/allot

FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /allot /allot
USER nonroot:nonroot
ENTRYPOINT ["/allot"]
