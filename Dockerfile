# syntax=docker/dockerfile:1
# The bellows image: one static binary on a distroless base, run as 65532.
# `make image` builds the same image without a Docker engine (hack/image,
# hack/image/ociimage); TestDockerfileMatches keeps the two in step.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t bellows:dev .

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X github.com/bellows-kv/bellows/internal/version.Version=${VERSION} -X github.com/bellows-kv/bellows/internal/version.Revision=${REVISION}" \
      -o /out/bellows ./cmd/bellows

FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="bellows" \
      org.opencontainers.image.description="Bellows: a log-structured key-value store for Kubernetes (store, compactor, operator)" \
      org.opencontainers.image.source="https://github.com/bellows-kv/bellows" \
      org.opencontainers.image.url="https://github.com/bellows-kv/bellows" \
      org.opencontainers.image.vendor="bellows-kv" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
ENV PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    SSL_CERT_FILE="/etc/ssl/certs/ca-certificates.crt"
WORKDIR /
# Root-owned and 0755: the nonroot user runs it but cannot replace it; nothing
# is written to the root filesystem (readOnlyRootFilesystem: true works).
COPY --from=build --chmod=0755 /out/bellows /bellows
USER 65532:65532
ENTRYPOINT ["/bellows"]
