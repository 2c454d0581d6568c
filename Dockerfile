# The allot binary for a real cluster (the Helm chart's image). A static binary on a
# distroless base: no shell, runs as non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/allot-dev/allot/internal/cli.Version=${VERSION}" -o /allot ./cmd/allot

FROM gcr.io/distroless/static:nonroot
COPY --from=build /allot /allot
USER nonroot:nonroot
ENTRYPOINT ["/allot"]
