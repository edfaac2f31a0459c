# Quarrel with the CUDA backend (the binary falls back to the CPU when the container sees no GPU).
#   docker build -t quarrel:cuda .
#   docker run --gpus all -p 8080:8080 -v "$HOME/.cache/quarrel/models:/models:ro" \
#     -e QUARREL_MODEL=/models/SmolLM2-135M-Instruct.Q4_1.gguf quarrel:cuda
# CPU-only image: Dockerfile.cpu. Whole stack (Prometheus, Grafana): docker-compose.yml, docs/operations.md.
ARG CUDA_VERSION=12.6.3
ARG UBUNTU=ubuntu24.04

# ---- build stage: CUDA devel image, nvcc + the Debian/Ubuntu -dev packages of CMakeLists.txt --------
FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# GPU generations to compile for (sm_80 A100, sm_86 RTX 30xx, sm_89 L4/RTX 40xx, sm_90 H100/H200).
ARG CUDA_ARCHITECTURES="80;86;89;90a"
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake make pkg-config \
      libpcre2-dev libutf8proc-dev libjansson-dev libcivetweb-dev libsqlite3-dev libssl-dev \
      libgrpc-dev libprotobuf-c-dev protobuf-c-compiler python3 \
      libjs-marked libjs-highlight.js node-dompurify libjs-katex \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Installs into /opt/quarrel (bin/quarrel, lib/libquarrel.{so,a}, include/quarrel.h, lib/pkgconfig/quarrel.pc,
# share/man/man1/quarrel.1), then lists the packages that own the shared libraries the binary needs: the
# runtime stage installs exactly those (same distribution release, so the names match).
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DQUARREL_CUDA=ON -DQUARREL_TESTS=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" -DCMAKE_INSTALL_PREFIX=/opt/quarrel \
 && cmake --build /build -j"$(nproc)" \
 && cmake --install /build \
 && ldd /opt/quarrel/bin/quarrel | awk '$3 ~ /^\// {print $3}' \
    | while read -r lib; do dpkg -S "*/$(gcc -print-multiarch)/${lib##*/}" 2>/dev/null | head -n1 | cut -d: -f1; done \
    | grep -v -x -e libc6 | sort -u > /opt/quarrel/share/quarrel-runtime-packages.txt \
 && test -s /opt/quarrel/share/quarrel-runtime-packages.txt

# ---- runtime stage: CUDA runtime image (cuBLAS included), non-root -------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU} AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=build /opt/quarrel/share/quarrel-runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && useradd --system --uid 10001 --user-group --create-home --home-dir /home/quarrel --shell /usr/sbin/nologin quarrel \
 && mkdir -p /models /var/lib/quarrel \
 && chown quarrel:quarrel /models /var/lib/quarrel
COPY --from=build /opt/quarrel/ /usr/local/
RUN ldconfig && quarrel --version

# Every `quarrel serve` flag also comes from QUARREL_<FLAG> (docs/operations.md). QUARREL_MODEL picks the
# model(s) loaded at start (comma-separated paths or Ollama names); bare names are looked up in /models.
ENV QUARREL_HOST=0.0.0.0 \
    QUARREL_PORT=8080 \
    QUARREL_MODEL_DIR=/models \
    OLLAMA_MODELS=/models/ollama \
    HOME=/home/quarrel
VOLUME ["/models", "/var/lib/quarrel"]
EXPOSE 8080
# the quarrel user created above (numeric, so Kubernetes runAsNonRoot can verify it)
USER 10001:10001
WORKDIR /home/quarrel
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
  CMD ["/bin/sh", "-c", "curl -fsS \"http://127.0.0.1:${QUARREL_PORT:-8080}/healthz\" || exit 1"]
# SIGTERM drains in-flight requests for --drain seconds (default 30): give `docker stop` at least that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["quarrel", "serve"]
