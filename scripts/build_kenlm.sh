#!/usr/bin/env bash
# Build KenLM's command-line tools (lmplz, build_binary, query) from the `kenlm` source
# distribution on PyPI into <venv>/kenlm/bin, where asr.lm finds them.
#   scripts/build_kenlm.sh [VENV]          (default .venv; run by `make install`)
# Idempotent: nothing is done when the three tools are already there. Needs cmake, a C++
# compiler and Boost (program_options, system, thread), zlib/bz2/lzma headers: the Debian
# packages scripts/install_system.sh installs. Without them it says what is missing and
# exits 0, like install_system.sh; the LM stage then names the missing tool when run.
set -euo pipefail
venv=${1:-.venv}
version=${KENLM_VERSION:-0.3.0}
dest="$venv/kenlm/bin"
tools=(lmplz build_binary query)

have_all() { local t; for t in "${tools[@]}"; do [[ -x "$dest/$t" ]] || return 1; done; }
have_all && exit 0

for cmd in cmake c++ make; do
  command -v "$cmd" >/dev/null || { echo "build_kenlm: '$cmd' not found; install cmake and build-essential to build KenLM" >&2; exit 0; }
done
if [[ ! -e /usr/include/boost/program_options.hpp ]]; then
  echo "build_kenlm: Boost headers not found (Debian: libboost-program-options-dev libboost-system-dev libboost-thread-dev)" >&2
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$SECONDS
echo "build_kenlm: building KenLM $version (lmplz, build_binary, query) into $dest" >&2
# The sdist only: its Python module is not needed, so no wheel is built. Its metadata is made in
# pip's own build environment, not the venv, which `make install` is filling at the same time.
if ! "$venv/bin/pip" download -q --no-deps --no-binary kenlm "kenlm==$version" -d "$work" >"$work/download.log" 2>&1; then
  grep -v '^WARNING: Location' "$work/download.log" | tail -20 >&2
  echo "build_kenlm: could not download the kenlm $version source (log above); the LM stage will not run" >&2
  exit 0
fi
tar xzf "$work"/kenlm-*.tar.gz -C "$work"
src=$(find "$work" -maxdepth 1 -type d -name 'kenlm-*' | head -1)
if ! cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DKENLM_MAX_ORDER=6 >"$work/cmake.log" 2>&1 \
   || ! make -C "$work/build" -j"$(nproc)" "${tools[@]}" >"$work/make.log" 2>&1; then
  tail -20 "$work/cmake.log" "$work/make.log" 2>/dev/null >&2 || true
  echo "build_kenlm: the KenLM build failed (log above); the LM stage will not run" >&2
  exit 0
fi
mkdir -p "$dest"
for t in "${tools[@]}"; do install -m 755 "$work/build/bin/$t" "$dest/$t"; done
echo "build_kenlm: done in $((SECONDS - start)) s" >&2
