#!/usr/bin/env bash
# What the tests need beyond Go: Debian's Chromium for the dashboard's browser tests,
# Node.js with npm to check that web/dist is what the front end's sources build to, and for
# the real node (kube/realnode, as root) busybox-static (its shell image),
# libseccomp-dev (runc is built with seccomp) and python3-torch (the elastic training run's
# workers run torchrun from the node's /usr).
# Installs what is missing when this machine can (root with apt-get); otherwise says how.
set -euo pipefail
need=()
have_chromium=
for b in "${ALLOT_CHROMIUM:-}" chromium chromium-browser google-chrome; do
  if [ -n "$b" ] && command -v "$b" >/dev/null; then have_chromium=1; break; fi
done
[ -n "$have_chromium" ] || need+=(chromium)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
if [ "$(id -u)" = 0 ]; then
  # The real node's tests run only as root (kube/realnode says so loudly elsewhere).
  [ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || need+=(busybox-static)
  [ -f /usr/include/seccomp.h ] || need+=(libseccomp-dev pkg-config)
  command -v file >/dev/null || need+=(file)
  [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null || need+=(python3-torch)
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian's ${need[*]} for the dashboard's tests …" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  exit 0
fi
echo "the dashboard's tests need ${need[*]}: sudo apt-get install ${need[*]} (or set ALLOT_CHROMIUM to a Chrome binary)" >&2
exit 1
