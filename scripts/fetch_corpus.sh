#!/usr/bin/env bash
# Fetches the training corpus from Debian 12 packages and extracts it to
# plain UTF-8 text, without installing anything system-wide:
#
#   .cache/corpus/debs/            the .deb files (apt-get download)
#   .cache/corpus/pkgs/<name>/     their unpacked trees (dpkg-deb -x)
#   .cache/corpus/text/<name>/...  one text document per source file
#   .cache/corpus/manifest.json    packages, versions, sha256 of every document
#
# Safe to run again: a package already downloaded, unpacked or extracted is
# skipped. A package that cannot be fetched is reported and left out (the
# manifest records it). LOOM_CORPUS_DIR moves the cache.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${LOOM_CORPUS_DIR:-$ROOT/.cache/corpus}"

# Debian 12 main, all free to redistribute, mostly English prose (~52 MB of text).
PACKAGES=(
  linux-doc-6.1 python3.11-doc perl-doc postgresql-doc-15
  manpages manpages-dev r-cran-janeaustenr bible-kjv bible-kjv-text fortunes
)

mkdir -p "$CACHE/debs" "$CACHE/pkgs"
# apt drops privileges to _apt while downloading; let it write here.
chmod 777 "$CACHE/debs" 2>/dev/null || true

deb_of() { compgen -G "$CACHE/debs/${1}_*.deb" | sort | tail -n 1 || true; }

missing=()
for p in "${PACKAGES[@]}"; do [[ -n "$(deb_of "$p")" ]] || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "corpus: downloading ${missing[*]}"
  for p in "${missing[@]}"; do
    # One package at a time so that one that cannot be had does not stop the others.
    if ! (cd "$CACHE/debs" && apt-get download -qq "$p" 2>/dev/null); then
      if [[ -z "${apt_updated:-}" && $(id -u) -eq 0 ]]; then
        apt-get update -qq && apt_updated=1
        (cd "$CACHE/debs" && apt-get download -qq "$p" 2>/dev/null) || echo "corpus: warning: cannot download $p, leaving it out" >&2
      else
        echo "corpus: warning: cannot download $p, leaving it out" >&2
      fi
    fi
  done
fi

for p in "${PACKAGES[@]}"; do
  deb="$(deb_of "$p")"
  [[ -n "$deb" ]] || continue
  stamp="$CACHE/pkgs/$p.control"
  control="$(dpkg-deb -f "$deb" Package Version; echo "Deb: $(basename "$deb")")"
  if [[ -d "$CACHE/pkgs/$p" && -f "$stamp" && "$(cat "$stamp")" == "$control" ]]; then continue; fi
  echo "corpus: unpacking $(basename "$deb")"
  rm -rf "$CACHE/pkgs/$p" "$CACHE/pkgs/$p.tmp" "$stamp"
  dpkg-deb -x "$deb" "$CACHE/pkgs/$p.tmp"
  mv "$CACHE/pkgs/$p.tmp" "$CACHE/pkgs/$p"
  printf '%s\n' "$control" > "$stamp"
done

/usr/bin/python3 "$ROOT/tools/extract_corpus.py" --cache "$CACHE" "${PACKAGES[@]}"
