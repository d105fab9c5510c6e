#!/usr/bin/env bash
# Install Debian's Chromium and ChromeDriver (when missing): what the console's browser tests drive
# (Playwright with executable_path=/usr/bin/chromium). A test tool's own browser download cannot
# work here (no internet), so the browser always comes from Debian's packages. Run as root.
set -euo pipefail

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    echo "chromium: $(/usr/bin/chromium --version 2>/dev/null | head -n1)"
    exit 0
fi
echo "chromium: installing chromium and chromium-driver from Debian's packages"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
echo "chromium: $(/usr/bin/chromium --version 2>/dev/null | head -n1)"
