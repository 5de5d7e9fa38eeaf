#!/bin/sh
# Managed by provision (role container_toolkit).
# A container sees the GPU, and still sees it after the host's systemd reloads: the trap of
# NVIDIA/nvidia-container-toolkit#48 ("Failed to initialize NVML: Unknown Error" in a running
# container after `systemctl daemon-reload`) shows only in a container that was running at the reload.
# usage: gpu-in-container-check IMAGE DOCKER-RUN-OPTIONS...   (e.g. --device nvidia.com/gpu=all)
set -eu
image=$1
shift
name=provision-gpu-check-$$
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
docker run -d --name "$name" "$@" --entrypoint sleep "$image" 300 >/dev/null
docker exec "$name" nvidia-smi -L
systemctl daemon-reload
echo "after systemctl daemon-reload:"
docker exec "$name" nvidia-smi -L
