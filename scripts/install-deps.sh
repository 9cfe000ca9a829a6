#!/usr/bin/env bash
# Installs every build and test dependency of kvserve from Debian 12 packages.
# Idempotent: packages already present are skipped by apt-get.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libopenblas-openmp-dev libcpp-httplib-dev
  libboost-dev  # Boost.Asio + Boost.Beast, header-only: the asynchronous HTTP server
  libgtest-dev libgmock-dev libbenchmark-dev
  libsndfile1-dev libfftw3-dev libsamplerate0-dev  # audio front end (Whisper)
  libzmq3-dev cppzmq-dev  # the prefill/decode control plane (pd/)
  libucx-dev  # disagg: the ucx KV transfer backend (UCP)
  clang-format
  curl jq  # the black-box server test drives kvserve serve with curl
)
# The OpenAI Node SDK test needs Node.js and npm (Debian 12: node 18). A Node.js installed some
# other way (e.g. NodeSource, which bundles npm) is used as it is.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
