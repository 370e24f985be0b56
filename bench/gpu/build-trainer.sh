#!/bin/bash
# Builds elastic-trainer on a GPU host against the PyTorch 2.x LibTorch of `python3` (NCCL +
# CUDA), without the daemon (its libraries may be missing there). Header-only dependencies that
# the host lacks can be supplied unpacked from Debian packages under .device/deps (see
# bench/gpu/README.md). Usage: bench/gpu/build-trainer.sh [build dir]   (default build/gpu)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build/gpu}
deps=$here/.device/deps
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
extra=()
if [ -d "$deps/usr" ]; then
  extra+=("-DCMAKE_PREFIX_PATH=$torch_prefix;$deps/usr;$deps/usr/share/cmake;$deps/usr/lib/x86_64-linux-gnu/cmake")
  if [ -f "$deps/usr/include/zlib.h" ] && ! [ -f /usr/include/zlib.h ]; then
    extra+=("-DZLIB_INCLUDE_DIR=$deps/usr/include" "-DZLIB_LIBRARY=$deps/usr/lib/x86_64-linux-gnu/libz.a")
  fi
else
  extra+=("-DCMAKE_PREFIX_PATH=$torch_prefix")
fi
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DELASTIC_BUILD_DAEMON=OFF \
  -DELASTIC_BUILD_TESTS=OFF "${extra[@]}"
cmake --build "$build" -j "$(nproc)" --target elastic-trainer
"$build/trainer/elastic-trainer" --version
