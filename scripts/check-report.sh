#!/usr/bin/env bash
# Renders a `ragtime report --html` page in headless Chromium (Debian's `chromium`: `apt-get install chromium`)
# and fails when the browser logs anything to the console (the page has no scripts, so any message means a
# broken page: malformed markup, a resource it could not load), or when the rendered page lacks the comparison
# table or, for a report over several runs, the plot. Saves a screenshot of its first 1200x900 pixels.
# Usage: scripts/check-report.sh PAGE.html [SCREENSHOT.png]   (default: PAGE.png beside the page)
set -euo pipefail
PAGE="${1:?usage: scripts/check-report.sh PAGE.html [SCREENSHOT.png]}"
SHOT="${2:-${PAGE%.html}.png}"
[[ -f $PAGE ]] || { echo "error: $PAGE: no such file" >&2; exit 2; }
CHROMIUM="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
[[ -n $CHROMIUM ]] || { echo "error: chromium not found (apt-get install chromium, or CHROMIUM=/path)" >&2; exit 2; }
URL="file://$(cd "$(dirname "$PAGE")" && pwd)/$(basename "$PAGE")"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# flags as a sandboxed machine without network needs them: no background connections, a fresh profile
FLAGS=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
  --disable-component-update --disable-sync --user-data-dir="$TMP/profile" --enable-logging=stderr --v=0)
timeout 120 "$CHROMIUM" "${FLAGS[@]}" --window-size=1200,900 --screenshot="$SHOT" "$URL" 2>"$TMP/log" >/dev/null
timeout 120 "$CHROMIUM" "${FLAGS[@]}" --dump-dom "$URL" 2>>"$TMP/log" >"$TMP/dom.html"
status=0
if grep -q ":CONSOLE" "$TMP/log"; then
  echo "FAIL: console messages while rendering $PAGE:" >&2
  grep ":CONSOLE" "$TMP/log" >&2
  status=1
fi
grep -q "<table" "$TMP/dom.html" || { echo "FAIL: $PAGE: no table in the rendered page" >&2; status=1; }
runs=$(grep -c '<tr><td>' "$TMP/dom.html" || true)
if grep -q "<figure>" "$PAGE" && ! grep -q "<svg" "$TMP/dom.html"; then
  echo "FAIL: $PAGE: the plot did not render" >&2; status=1
fi
[[ -s $SHOT ]] || { echo "FAIL: no screenshot written" >&2; status=1; }
if [[ $status == 0 ]]; then
  echo "ok: $PAGE rendered without console messages ($(grep -c '<svg' "$TMP/dom.html" || true) plot, $runs table rows); screenshot $SHOT"
fi
exit $status
