#!/usr/bin/env bash
# tools/corpus.sh — extract a corpus of the Linux kernel's reStructuredText documentation from
# Debian's linux-source-6.1 package into a folder, once, in a fixed order (docs/training.md
# §"The default corpus and why").
#
# Usage: tools/corpus.sh OUT_DIR [--except=SUBDIR]... [SUBDIR...]
#   OUT_DIR  the corpus folder to write (it must not exist); OUT_DIR.complete marks a finished
#            extraction, which a second call leaves as it is (the files go to OUT_DIR.partial first)
#   SUBDIR   folders of Documentation/ to take (every *.rst under them); none = the whole tree
#   --except=SUBDIR  a top-level folder of Documentation/ to leave out of the whole tree
# Examples: tools/corpus.sh data/linux-docs admin-guide process        (the default corpus, 3.3 MB)
#           tools/corpus.sh data/linux-docs-en --except=translations   (every English .rst, 21 MB)
# The package is installed if /usr/src/linux-source-6.1.tar.xz is missing (apt-get; root or sudo).
set -euo pipefail
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
case ${1:-} in -h | --help) usage; exit 0 ;; esac
[ $# -ge 1 ] || { usage >&2; exit 2; }
OUT=$1
shift
[[ -n $OUT && $OUT != -* ]] || { echo "corpus.sh: OUT_DIR '$OUT' must be a path (not empty, not an option)" >&2; exit 2; }
except=()
subs=()
for arg in "$@"; do
  case $arg in --except=*) except+=("${arg#--except=}") ;; *) subs+=("$arg") ;; esac
done
set -- ${subs[@]+"${subs[@]}"}
[ ${#except[@]} -eq 0 ] || [ $# -eq 0 ] || { echo "corpus.sh: --except applies to the whole tree, not to SUBDIRs" >&2; exit 2; }
TARBALL=/usr/src/linux-source-6.1.tar.xz
log() { printf '\033[1m[corpus]\033[0m %s\n' "$*" >&2; }

for sub in "$@" ${except[@]+"${except[@]}"}; do
  [[ $sub =~ ^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$ && $sub != *..* ]] \
    || { echo "corpus.sh: SUBDIR '$sub' must be a plain path inside Documentation/" >&2; exit 2; }
done
if [ -f "$OUT.complete" ]; then exit 0; fi
# Never remove what this script did not make: OUT must not exist (a finished extraction has
# OUT.complete); the extraction goes to OUT.partial and is renamed when whole.
[ ! -e "$OUT" ] || { echo "corpus.sh: $OUT exists but is not a finished extraction (no $OUT.complete): remove it or choose another OUT_DIR" >&2; exit 2; }
if [ ! -f "$TARBALL" ]; then
  log "installing linux-source-6.1"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends linux-source-6.1
fi
patterns=()
if [ $# -eq 0 ]; then
  patterns=('linux-source-6.1/Documentation/*')
else
  for sub in "$@"; do patterns+=("linux-source-6.1/Documentation/$sub/*"); done
fi
log "extracting ${*:-the whole Documentation tree} (*.rst) into $OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -xJf "$TARBALL" -C "$tmp" --wildcards "${patterns[@]}"
src="$tmp/linux-source-6.1/Documentation"
for sub in "$@" ${except[@]+"${except[@]}"}; do
  [ -d "$src/$sub" ] || { echo "corpus.sh: no folder Documentation/$sub in linux-source-6.1" >&2; exit 2; }
done
roots=("$@")
if [ $# -eq 0 ]; then
  mapfile -t roots < <(cd "$src" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | LC_ALL=C sort)
  for ex in ${except[@]+"${except[@]}"}; do
    mapfile -t roots < <(printf '%s\n' "${roots[@]}" | grep -vxF -- "$ex")
  done
fi
part="$OUT.partial"
rm -rf "$part"
mkdir -p "$part"
(cd "$src" && find "${roots[@]}" -type f -name '*.rst' | LC_ALL=C sort) |
  while read -r f; do
    mkdir -p "$part/$(dirname "$f")"
    cp "$src/$f" "$part/$f"
  done
mv "$part" "$OUT"
touch "$OUT.complete"
log "$OUT: $(find "$OUT" -name '*.rst' | wc -l) files, $(find "$OUT" -name '*.rst' -print0 | xargs -0 cat | wc -c) bytes"
