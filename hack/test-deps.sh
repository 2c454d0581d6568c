#!/usr/bin/env bash
# What the tests need beyond Go: Debian's Chromium for the dashboard's browser tests.
# Installs it when missing and this machine can (root with apt-get); otherwise says how.
set -euo pipefail
for b in "${ALLOT_CHROMIUM:-}" chromium chromium-browser google-chrome; do
  if [ -n "$b" ] && command -v "$b" >/dev/null; then exit 0; fi
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian's chromium for the dashboard's browser tests …" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  exit 0
fi
echo "the dashboard's browser tests need Chromium: sudo apt-get install chromium (or set ALLOT_CHROMIUM to a Chrome binary)" >&2
exit 1
