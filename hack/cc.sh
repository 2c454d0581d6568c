#!/usr/bin/env bash
# Allot reads GPUs through NVIDIA's NVML library (github.com/NVIDIA/go-nvml), which Go
# reaches through cgo: building needs a C compiler. Installs Debian's gcc when it is
# missing and this machine can (root with apt-get); otherwise says how.
set -euo pipefail
cc=$(go env CC)
command -v "${cc%% *}" >/dev/null && [ "$(go env CGO_ENABLED)" = 1 ] && exit 0
if ! command -v "${cc%% *}" >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian's gcc (cgo, for NVIDIA's NVML bindings) …" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null
  exit 0
fi
if [ "$(go env CGO_ENABLED)" != 1 ] && command -v "${cc%% *}" >/dev/null; then
  echo "CGO_ENABLED=0: Allot's GPU agent needs cgo (NVIDIA's NVML bindings); unset it or set CGO_ENABLED=1" >&2
  exit 1
fi
echo "building Allot needs a C compiler for cgo (NVIDIA's NVML bindings): sudo apt-get install gcc (or xcode-select --install on macOS)" >&2
exit 1
