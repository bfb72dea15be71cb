#!/usr/bin/env bash
# Build the documentation site into .build/docs/html and check that a browser renders it.
# Usage: tools/docs.sh   (make docs; ANSIBLE_COLLECTIONS_PATH must find sturdy.workers, as `make docs` sets it)
#
# docs/*.md and docs/*.rst are the pages; antsibull-docs writes the reference of every module, filter, lookup and role
# from their own documentation and argument specs into collections/; Sphinx builds both with warnings as errors, so
# an unresolved reference or a link to a missing page or heading fails the build. Then Debian's chromium, headless,
# opens the index and one module page: each must show its title (the DOM after the page's scripts ran), and a
# screenshot of each is left beside the site to look at.
set -euo pipefail
command -v chromium >/dev/null || { echo "docs: chromium is missing (make docs installs Debian's package)" >&2; exit 1; }
here=$(cd "$(dirname "$0")/.." && pwd)
out=$here/.build/docs
src=$out/src
rm -rf "$out"
mkdir -p "$src"
# antsibull-docs writes only into a directory that no one else may write to.
chmod 700 "$out" "$src"
cp "$here"/docs/*.md "$here"/docs/*.rst "$src"/
antsibull-docs --config-file "$here/docs/antsibull-docs.cfg" collection --use-current --dest-dir "$src" \
  sturdy.workers >"$out/antsibull.log" 2>&1 || { cat "$out/antsibull.log" >&2; exit 1; }
sphinx-build -q -W --keep-going -b html -c "$here/docs" "$src" "$out/html"

render() {  # page, text it must show
  local page=$out/html/$1 png=$out/$(basename "$1" .html).png dom
  dom=$(chromium --headless --no-sandbox --disable-gpu --dump-dom "file://$page" 2>/dev/null)
  grep -qF "$2" <<<"$dom" || { echo "docs: chromium did not render '$2' in $page" >&2; exit 1; }
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1400 \
    --screenshot="$png" "file://$page" >/dev/null 2>&1
  [ -s "$png" ] || { echo "docs: chromium made no screenshot of $page" >&2; exit 1; }
}
render index.html "How a deploy works"
render collections/sturdy/workers/smoke_test_module.html "sturdy.workers.smoke_test module"
echo "docs: $out/html/index.html ($(find "$out/html" -name '*.html' | wc -l) pages; screenshots in $out)"
