#!/usr/bin/env bash
# Installs dependencies, configures and builds gpuqos into build/ (Ninja, RelWithDebInfo).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DGPUQOS_WERROR="${GPUQOS_WERROR:-OFF}" >/dev/null
cmake --build build -j "$(nproc)"
