# attnd container image: a multi-stage build on Debian bookworm-slim.
#
#   docker build -t attnd .            (or: podman build --format docker -t attnd .)
#   docker run -p 8080:8080 -v attnd-data:/data attnd
#
# Stage 1 compiles build/attnd with the -dev packages (libxsmm-dev's code generator is linked in
# statically); stage 2 holds only the shared libraries it links (libmicrohttpd, jansson, OpenBLAS), the
# binary, and a non-root user: no compiler, no shell tools added.
# Configuration is by ATTND_* environment variables (`attnd --help` lists every one); the data dir /data
# is a volume so that layers survive the container and can be shared by replicas (with ATTND_WATCH=1).
# The build needs neither git nor anything outside this directory.

ARG DEBIAN_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS build
# (libxsmm-dev exists for amd64 only; elsewhere the Makefile builds without it)
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        gcc libc6-dev make libmicrohttpd-dev libjansson-dev libopenblas-dev \
        $(if [ "$(dpkg --print-architecture)" = amd64 ]; then echo libxsmm-dev; fi) \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The packages above are what `make`'s dependency step would install (minus the test-only libcurl):
# mark them present so the build does not reach for apt again. GIT_REV labels the binary's --version.
ARG GIT_REV=unknown
RUN rm -rf build && mkdir -p build && touch build/.deps-ok \
 && make -j"$(nproc)" build/attnd GIT_REV="${GIT_REV}" \
 && strip build/attnd \
 && ./build/attnd --version

FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libmicrohttpd12 libjansson4 libopenblas0-pthread \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
 && groupadd --system --gid 10001 attnd \
 && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin attnd \
 && mkdir -p /data && chown 10001:10001 /data
COPY --from=build /src/build/attnd /usr/local/bin/attnd

# Listen on every interface inside the container (the default 127.0.0.1 would be unreachable from outside).
ENV ATTND_HOST=0.0.0.0 \
    ATTND_PORT=8080 \
    ATTND_DATA_DIR=/data
VOLUME /data
WORKDIR /data
EXPOSE 8080
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
# SIGTERM makes attnd stop accepting, finish the requests in flight and exit 0.
STOPSIGNAL SIGTERM
# attnd probes its own /healthz over a raw socket: the image needs no curl or wget.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["attnd", "--healthcheck"]
ENTRYPOINT ["attnd"]
