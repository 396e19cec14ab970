#!/usr/bin/env bash
# Debian packages the toolkit uses, installed when missing (needs root or sudo).
# Without them the toolkit still runs; the features that need them say so when used.
set -euo pipefail
packages=(sctk)   # NIST SCTK: sclite/hubscr.pl for official Hub5 scoring
# To build KenLM's lmplz/build_binary/query (scripts/build_kenlm.sh): compiler, CMake, Boost, compression libs
packages+=(g++ make cmake libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev
           zlib1g-dev libbz2-dev liblzma-dev)
packages+=(iproute2)  # `ip netns`: the two-host distributed training test (tests/distributed)

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if ! command -v apt-get >/dev/null; then
  echo "install_system: no apt-get here; please install: ${missing[*]}" >&2; exit 0
fi
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then sudo="sudo"; else
    echo "install_system: not root and no sudo; please install: ${missing[*]}" >&2; exit 0
  fi
fi
echo "install_system: installing ${missing[*]}" >&2
$sudo apt-get update -qq >/dev/null || echo "install_system: apt-get update failed; trying anyway" >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
  || echo "install_system: could not install ${missing[*]}; the features that need them will say so" >&2
