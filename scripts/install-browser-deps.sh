#!/usr/bin/env bash
# Install the browser the console's tests drive (tests/e2e/console), when missing
# (idempotent): Debian's headless-capable Chromium and its fonts. Playwright for Python
# (the dev extra) drives this system binary (/usr/bin/chromium); `playwright install`
# (a browser download) is never run. Needs root when something is missing.
set -euo pipefail
need=""
for p in chromium fonts-dejavu-core; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
[ -z "$need" ] && exit 0
if [ "$(id -u)" != 0 ]; then echo "install-browser-deps: missing$need (apt-get install them as root)" >&2; exit 1; fi
echo "install-browser-deps: installing$need" >&2
apt-get update -q >&2
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >&2
