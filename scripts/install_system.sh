#!/usr/bin/env bash
# Debian packages the toolkit uses, installed when missing (as root, or with sudo that needs no
# password). Anything else (not Debian, not root and no password-less sudo, a failed apt-get):
# it says what it would install, and how, and exits 0, never stopping a run at a sudo prompt.
# Without the packages the toolkit still runs; the features that need them say so when used.
set -euo pipefail
packages=(sctk)   # NIST SCTK: sclite/hubscr.pl for official Hub5 scoring
# To build KenLM's lmplz/build_binary/query (scripts/build_kenlm.sh): compiler, CMake, Boost, compression libs
packages+=(g++ make cmake libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev
           zlib1g-dev libbz2-dev liblzma-dev)
packages+=(iproute2)  # `ip netns`: the two-host distributed training test (tests/distributed)

say() { echo "install_system: $*" >&2; }

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
  say "not a Debian system (no dpkg-query/apt-get); if missing, please install the equivalents of: ${packages[*]}"
  exit 0
fi

# `dpkg -s` also succeeds for a package removed but not purged; the status says "installed".
missing=()
for p in "${packages[@]}"; do
  [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  # -n: fail at once instead of asking for a password in the middle of `make install`.
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    say "not root and no password-less sudo; not installing. Missing: ${missing[*]}"
    say "to install them: sudo apt-get install -y --no-install-recommends ${missing[*]}"
    exit 0
  fi
fi
say "installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq >/dev/null || say "apt-get update failed; trying anyway"
# env inside sudo: sudo resets the environment, and apt must not ask questions either.
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
  || say "could not install ${missing[*]}; the features that need them will say so"
