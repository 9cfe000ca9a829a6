#!/usr/bin/env bash
# The main job: installs the dependencies, builds kvserve and runs it (version, platforms and a
# self-check of the KV memory system). Arguments go to kvserve.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)" --target kvserve_cli
exec build/kvserve "$@"
