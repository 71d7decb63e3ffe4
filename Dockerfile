# syntax=docker/dockerfile:1
# mixserve images (docs/deploy.md):
#   docker build -t mixserve .                    GPU image (CUDA 13), the default target
#   docker build -t mixserve:cpu --target cpu .   CPU-only image
#
# Why Debian 12 and not nvidia/cuda:13.x-devel-ubuntu24.04: CI builds and tests on Debian 12 with
# scripts/install-deps, so building on the same release with the same script gives the compiler
# (g++ 12) and the gRPC 1.51 / protobuf 3.21 / Abseil / sentencepiece versions that CI tested;
# Ubuntu 24.04 has other versions of these and no python3-torch, which install-deps installs.
# CUDA comes from NVIDIA's Debian 12 repository: the nvcc 13 + g++ 12 pair the CUDA backend is
# developed with (DESIGN §11). The GPU runtime is debian:12-slim plus NVIDIA's CUDA runtime
# packages: what nvidia/cuda's runtime images add, limited to the libraries mixserve links.

ARG CUDA_VERSION=13.0
# Portable code for any x86-64 host with AVX2/FMA (the build machine's -march=native would tie
# the image to its CPU).
ARG MARCH=x86-64-v3

# ---- the packages CI installs, by CI's own script (cached until the script changes)
FROM debian:12 AS deps
COPY scripts/install-deps /tmp/install-deps
RUN /tmp/install-deps && rm -rf /var/lib/apt/lists/*

# ---- CPU build: the server without the CUDA backend
FROM deps AS build-cpu
ARG MARCH
WORKDIR /src
COPY . .
RUN cmake --preset release -DMIXSERVE_CUDA=OFF -DMIXSERVE_NATIVE=OFF -DCMAKE_CXX_FLAGS="-march=${MARCH}" \
 && cmake --build --preset release --target mixserve \
 && deploy/docker/stage build/release/app/mixserve /stage

# ---- GPU build: nvcc and the CUDA libraries from NVIDIA's Debian 12 repository
FROM deps AS build-gpu
ARG CUDA_VERSION
ARG MARCH
# sm_90 (H100/H200) by default; e.g. "80;90" adds A100.
ARG CUDA_ARCHITECTURES=90
RUN curl -fsSL -o /tmp/cuda-keyring.deb \
      https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
 && dpkg -i /tmp/cuda-keyring.deb && apt-get update \
 && v=$(echo "${CUDA_VERSION}" | tr . -) \
 && apt-get install -y --no-install-recommends cuda-minimal-build-$v libcublas-dev-$v \
 && rm -rf /var/lib/apt/lists/*
ENV CUDACXX=/usr/local/cuda-${CUDA_VERSION}/bin/nvcc
WORKDIR /src
COPY . .
RUN cmake --preset release -DMIXSERVE_CUDA=ON -DMIXSERVE_NATIVE=OFF -DCMAKE_CXX_FLAGS="-march=${MARCH}" \
      -DMIXSERVE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
 && cmake --build --preset release --target mixserve \
 && deploy/docker/stage build/release/app/mixserve /stage

# ---- what both runtime images share
FROM debian:12-slim AS runtime
# curl for HEALTHCHECK; a fixed uid so Kubernetes' runAsUser (deploy/k8s) matches. USER below is
# numeric: only then can the kubelet verify runAsNonRoot.
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 mixserve \
 && useradd --uid 10001 --gid mixserve --home-dir /opt/mixserve --no-create-home mixserve
# malloc backs its heap with transparent huge pages (THP in "madvise" mode, the kernel default):
# the engine thread walks hundreds of requests' page lists and objects every step, and with
# 4 KiB pages its TLB misses and page faults were ~2 µs of a ~12 µs step (docs/scheduler.md).
ENV GLIBC_TUNABLES=glibc.malloc.hugetlb=1
# The relative default --static-dir (clients/playground) resolves here.
WORKDIR /opt/mixserve
EXPOSE 50051 8000
# Liveness only: /ready (503 while draining) is for load balancers, and a draining container
# is not unhealthy. Adjust the port if you change --http-port.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8000/health || exit 1
# SIGTERM drains for --drain-seconds (30 s): stop with `docker stop -t 40` or a compose
# stop_grace_period above it.
STOPSIGNAL SIGTERM
# The defaults that differ from a bare `mixserve serve` are environment variables (MIXSERVE_<FLAG>,
# docs/cli.md), not a CMD: `docker run mixserve --max-batch 64` appends flags and keeps listening
# on every interface; a flag on the command line still wins over its variable. The model is
# models/default under the WORKDIR unless --model names another.
ENV MIXSERVE_HOST=0.0.0.0 MIXSERVE_GRPC_PORT=50051 MIXSERVE_HTTP_PORT=8000
ENTRYPOINT ["/opt/mixserve/bin/mixserve", "serve"]
CMD []

# ---- CPU-only image: docker build --target cpu .
FROM runtime AS cpu
COPY --from=build-cpu /stage/ /
RUN apt-get update \
 && xargs -a /opt/mixserve/runtime-packages.txt apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/*
USER 10001:10001

# ---- GPU image (default): the host needs the NVIDIA driver and container toolkit
# (docker run --gpus all; Kubernetes: the NVIDIA device plugin).
FROM runtime AS gpu
COPY --from=build-gpu /tmp/cuda-keyring.deb /tmp/cuda-keyring.deb
COPY --from=build-gpu /stage/ /
# runtime-packages.txt names NVIDIA's cuda-cudart (and cuBLAS, if linked) next to Debian's.
RUN dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb && apt-get update \
 && xargs -a /opt/mixserve/runtime-packages.txt apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/*
# What the NVIDIA container toolkit reads to mount the driver, as in nvidia/cuda's images.
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001
