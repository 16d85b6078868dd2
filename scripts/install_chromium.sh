#!/usr/bin/env bash
# Install Debian's Chromium for the site's browser check (scripts/browser_check.py), which
# Playwright drives through executable_path: Playwright never downloads a browser here.
# Idempotent: does nothing when a chromium binary is already on the PATH.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    echo "chromium already installed: $(chromium --version 2>/dev/null || echo unknown version)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
# Another apt run (an unattended upgrade, a second install) may hold the lock for a while:
# wait for it rather than fail at once.
APT=($SUDO apt-get -o DPkg::Lock::Timeout=300)
"${APT[@]}" update -qq
"${APT[@]}" install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo "installed: $(chromium --version)"
