#!/usr/bin/env bash
# Recompile the PDF paper fixtures in this folder.
#
#   bash tests/data_prep/papers/build.sh            # every NAME.tex
#   bash tests/data_prep/papers/build.sh llncs amsart   # only these
#
# Each NAME.tex names its engine on a line "% engine: pdflatex|xelatex|lualatex"
# near the top (pdflatex if none). The engine runs twice in a temporary folder
# (so cross-references and page totals settle); only NAME.pdf is copied back,
# no aux/log files are left here. A failing fixture prints the end of its log.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export SOURCE_DATE_EPOCH=0 FORCE_SOURCE_DATE=1

names=()
if [ $# -gt 0 ]; then
  for arg in "$@"; do names+=("$(basename "$arg" .tex)"); done
else
  for tex in "$here"/*.tex; do names+=("$(basename "$tex" .tex)"); done
fi

failed=0
for name in "${names[@]}"; do
  tex="$here/$name.tex"
  if [ ! -f "$tex" ]; then echo "MISSING $tex"; failed=1; continue; fi
  engine="$(sed -n '1,10s/^%[[:space:]]*engine:[[:space:]]*\([a-z]*\).*/\1/p' "$tex" | head -n 1)"
  engine="${engine:-pdflatex}"
  case "$engine" in
    pdflatex|xelatex|lualatex) ;;
    *) echo "FAIL $name: unknown engine '$engine'"; failed=1; continue ;;
  esac
  tmp="$(mktemp -d)"
  cp "$tex" "$tmp/"
  ok=1
  for pass in 1 2; do
    if ! (cd "$tmp" && "$engine" -interaction=nonstopmode -halt-on-error "$name.tex" >/dev/null 2>&1); then
      ok=0
      break
    fi
  done
  if [ "$ok" = 1 ] && [ -f "$tmp/$name.pdf" ]; then
    cp "$tmp/$name.pdf" "$here/$name.pdf"
    echo "ok   $name ($engine, $(wc -c <"$here/$name.pdf") bytes)"
  else
    echo "FAIL $name ($engine); end of $name.log:"
    tail -n 25 "$tmp/$name.log" 2>/dev/null | sed 's/^/    /'
    failed=1
  fi
  rm -rf "$tmp"
done
exit "$failed"
