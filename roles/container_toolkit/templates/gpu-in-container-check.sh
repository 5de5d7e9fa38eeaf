#!/bin/sh
# Managed by provision (role container_toolkit).
# A container sees the GPU, and still sees it after the host's systemd reloads: the trap of
# NVIDIA/nvidia-container-toolkit#48 ("Failed to initialize NVML: Unknown Error" in a running
# container after `systemctl daemon-reload`) shows only in a container that was running at the reload.
# usage: gpu-in-container-check [--cuda] IMAGE DOCKER-RUN-OPTIONS...   (e.g. --device nvidia.com/gpu=all)
#
# --cuda: CUDA itself starts in the container too, as the model server's worker starts it
# (`torch.cuda.init()`, so IMAGE is the serving image, with python3 and torch). NVML (nvidia-smi) can
# work while CUDA cannot: vLLM images from 0.15 under CDI on driver 580 failed with "Error 803: system
# has unsupported display driver / cuda driver combination" (vllm-project/vllm#33116, #34821;
# gpustack/gpustack#4678; ggml-org/llama.cpp#23111 on an RTX 5090): their CUDA compatibility libcuda
# came first on the library path.
#
# Whether a container keeps the GPU is decided by this boot's driver, the container toolkit, the
# docker engine and their settings: once the check passed, it passes again until one of them
# changes (a converged rerun would start a container and reload systemd every time for nothing).
# A pass is kept in the stamp with a digest of all of them; the same digest prints the pass it
# recorded. PROVISION_GPU_CHECK_AGAIN=1 checks anyway (the handler that runs after a docker restart);
# PROVISION_GPU_CHECK_STAMP names another stamp.
set -eu
cuda=
if [ "${1:-}" = --cuda ]; then
  cuda=1
  shift
fi
image=$1
shift
stamp=${PROVISION_GPU_CHECK_STAMP:-/var/lib/provision/gpu-in-container-check.pass}
# (each part may name files a host lacks: `|| true`, or errexit would end the digest's input there)
stack=$({
  cat /proc/sys/kernel/random/boot_id /proc/driver/nvidia/version /etc/docker/daemon.json \
    /etc/nvidia-container-runtime/config.toml /etc/cdi/*.yaml /var/run/cdi/*.yaml "$0" || true
  stat -L -c '%n %s %Y' /usr/bin/dockerd /usr/bin/containerd /usr/bin/runc /usr/bin/nvidia-container-runtime \
    /usr/bin/nvidia-container-runtime-hook /usr/bin/nvidia-container-cli /usr/bin/nvidia-ctk || true
  printf '%s\n' "cuda=$cuda" "$image" "$@"
} 2>/dev/null | sha256sum)
stack=${stack%% *}
if [ -z "${PROVISION_GPU_CHECK_AGAIN:-}" ] && [ "$(head -n 1 "$stamp" 2>/dev/null)" = "stack=$stack" ]; then
  tail -n +2 "$stamp" | { IFS= read -r first; echo "passed earlier on this boot, nothing it depends on changed: $first"; cat; }
  exit 0
fi
rm -f -- "$stamp"
name=provision-gpu-check-$$
# torch's error, when it fails, is its RuntimeError's text (the traceback's last line)
CUDA_INIT='import torch; torch.cuda.init(); print("CUDA initialised in the container:", torch.cuda.get_device_name(0))'
out=$(mktemp)
trap 'rm -f -- "$out" "$stamp.partial"; docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
if { docker run -d --name "$name" "$@" --entrypoint sleep -- "$image" 300 >/dev/null &&
     docker exec "$name" nvidia-smi -L &&
     { [ -z "$cuda" ] || docker exec "$name" python3 -c "$CUDA_INIT"; } && systemctl daemon-reload &&
     echo "after systemctl daemon-reload:" && docker exec "$name" nvidia-smi -L; } >"$out" 2>&1; then
  cat -- "$out"
  mkdir -p -- "${stamp%/*}"
  { echo "stack=$stack"; cat -- "$out"; } >"$stamp.partial" && mv -f -- "$stamp.partial" "$stamp"
else
  rc=$?
  cat -- "$out"
  exit "$rc"
fi
