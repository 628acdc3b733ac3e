#!/usr/bin/env bash
# Rebuild static/vendor/ from npm: preact, htm and uPlot bundled into one ES module with
# esbuild, uPlot's CSS and the three licenses copied. Run by hand when upgrading; the
# output is committed (the dashboard never fetches anything at run time).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/static/vendor"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm init -y >/dev/null
npm install --no-audit --no-fund --save-exact preact@11.2.0 htm@3.1.1 uplot@1.6.32 esbuild@0.28.2
cp "$here/vendor-entry.js" entry.js
npx esbuild entry.js --bundle --minify --format=esm --target=es2020 --legal-comments=none \
  --outfile="$out/vendor.min.js"
cp node_modules/uplot/dist/uPlot.min.css "$out/uPlot.min.css"
cp node_modules/preact/LICENSE "$out/LICENSE-preact.txt"
cp node_modules/htm/LICENSE "$out/LICENSE-htm.txt"
cp node_modules/uplot/LICENSE "$out/LICENSE-uplot.txt"
echo "rebuilt $out"
