#!/usr/bin/env bash
# Installs frugal's build and test dependencies from Debian 12 packages (see docs/dependencies.md
# for why each is there). Safe to re-run; skips apt entirely when everything is already present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git xz-utils
  libopenblas-openmp-dev libdnnl-dev libpcre2-dev liblzma-dev libzstd-dev zlib1g-dev zstd
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  openmpi-bin libopenmpi-dev
  gnuplot-nox
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

run_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
echo "installing: ${missing[*]}"
run_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
run_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
