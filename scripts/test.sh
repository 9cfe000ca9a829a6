#!/usr/bin/env bash
# The test command: installs the dependencies, builds kvserve with warnings as errors, and runs
# every test (GPU tests skip themselves on a machine without a CUDA device).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The official OpenAI Node SDK for the black-box server test, at the version package-lock.json pins.
npm ci --prefix tests/integration/openai_node --no-audit --no-fund --loglevel=error
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSERVE_WERROR=ON
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
