#!/bin/bash
# Prepares, HERE (Debian 12), what the GPU host needs for bench/gpu/run-on-device.sh, in the
# git-ignored folder .device (carried to the device with the working tree):
#   .device/bin   elasticd and elasticctl (Release, stripped; glibc 2.36 binaries run on the
#                 host's newer glibc)
#   .device/lib   every shared library they load except glibc's own and the C++ runtime (the
#                 host's newer libstdc++/libgcc serve): ZeroMQ and its transports, hwloc,
#                 spdlog/fmt, ...; run-on-device.sh puts it on LD_LIBRARY_PATH
#   .device/deps  header-only packages for the trainer build there (CLI11, nlohmann-json, zlib
#                 headers; see bench/gpu/README.md), fetched with apt-get download if missing
# The trainer itself is built on the host against its PyTorch (bench/gpu/build-trainer.sh).
# Usage: bench/gpu/build-for-device.sh [build dir]   (default build-gpu-daemon)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${1:-build-gpu-daemon}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DELASTIC_BUILD_TRAINER=OFF \
  -DELASTIC_BUILD_TESTS=OFF >/dev/null
for t in elasticd elasticctl; do cmake --build "$build" --target "$t" -j "${JOBS:-2}"; done
rm -rf .device/bin .device/lib
mkdir -p .device/bin .device/lib
strip -o .device/bin/elasticd "$build/daemon/elasticd"
strip -o .device/bin/elasticctl "$build/ctl/elasticctl"
# glibc, the dynamic loader and the C++ runtime stay the host's.
skip='^(libc|libm|libdl|librt|libpthread|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so'
ldd .device/bin/elasticd .device/bin/elasticctl | awk '/=> \//{print $1, $3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $skip ]] && continue
    cp -L "$path" ".device/lib/$name"
  done
if ! [ -f .device/deps/usr/include/nlohmann/json.hpp ] || ! [ -d .device/deps/usr/include/CLI ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download libcli11-dev nlohmann-json3-dev zlib1g-dev)
  for d in "$tmp"/*.deb; do dpkg -x "$d" .device/deps; done
  rm -rf "$tmp"
fi
grep -qx '/.device/' .gitignore || echo "warning: .device is not git-ignored" >&2
du -sh .device/bin .device/lib .device/deps
ls .device/lib
