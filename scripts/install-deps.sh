#!/usr/bin/env bash
# Installs every Debian package gpuqos needs to build and test, and checks for the CUDA toolkit.
# Idempotent: packages already present are not reinstalled; safe to run on every CI start.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git python3 python3-matplotlib
  libboost-dev libeigen3-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
)

# The CUDA toolkit is not a Debian package here: it must already be installed (headers, cupti, the libcuda stub).
# Checked first: without it nothing builds, so nothing is downloaded for it.
cuda_root=${CUDAToolkit_ROOT:-/usr/local/cuda}
if [[ ! -f "$cuda_root/include/cuda.h" ]]; then
  echo "install-deps: no CUDA toolkit at '$cuda_root' (cuda.h not found)." >&2
  echo "  Install CUDA toolkit 12 or newer, or set CUDAToolkit_ROOT to where it lives." >&2
  exit 1
fi
version=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$cuda_root/include/cuda.h")
if [[ -z "$version" || "$version" -lt 12000 ]]; then
  echo "install-deps: CUDA toolkit at '$cuda_root' is version ${version:-unknown}; gpuqos needs 12.0 or newer." >&2
  exit 1
fi
echo "install-deps: CUDA toolkit $((version / 1000)).$((version % 1000 / 10)) at $cuda_root"

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null; then
      echo "install-deps: installing packages needs root, and there is no sudo here: run this as root" >&2
      echo "  (apt-get install ${missing[*]})" >&2
      exit 1
    fi
    sudo_cmd=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#packages[@]} packages present"
fi

