#!/usr/bin/env bash
# The diagrams' library, which the documentation site serves itself (docs/hooks.py puts it
# on the pages that draw one), so that the diagrams render offline. Fetched once from npm,
# pinned and checked; run by tests/run, or by hand before `mkdocs build`.
set -euo pipefail
cd "$(dirname "$0")"
version=11.12.0
sum=07e37dfa97b337ccc85365d57eddf99b9706f09db3b59b260d0333b23b343c4b
check() { echo "$sum  mermaid.min.js" | sha256sum --check --status 2>/dev/null; }
check && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "mermaid@$version" >/dev/null \
  && tar xzf "mermaid-$version.tgz" package/dist/mermaid.min.js)
mv "$tmp/package/dist/mermaid.min.js" mermaid.min.js
check || { echo "docs/assets/mermaid.sh: mermaid.min.js is not mermaid $version" >&2; exit 1; }
