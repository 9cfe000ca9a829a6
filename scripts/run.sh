#!/usr/bin/env bash
# The main job: installs the dependencies, builds kvserve and runs it. With no arguments it prints
# the version and platforms, lets the shipped demo model (models/demo-lm, docs/demo-models.md)
# answer two prompts and the demo speech model (models/demo-whisper) transcribe two committed
# clips; arguments go to kvserve instead (e.g. `scripts/run.sh serve --port 30000`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)" --target kvserve_cli
if [ $# -gt 0 ]; then
  exec build/kvserve "$@"
fi
build/kvserve version
build/kvserve generate --prompt "The secret of life is" --prompt "Computers are" \
  --max-new-tokens 48 --seed 7
exec build/kvserve transcribe --log-level warn tests/fixtures/audio/demo_whisper/demo_sentence_1.wav \
  tests/fixtures/audio/demo_whisper/demo_number_0.wav
