#!/usr/bin/env bash
# Installs NVIDIA's CUDA tool wheels into the venv folder $1 unless it holds
# them already (ci/install-nvidia-tools.sh runs it; it says why). Under a
# lock beside the folder, so that two first uses at once install once; into
# a temporary folder renamed into place only once pip has installed every
# wheel, so that a failed or killed install leaves nothing that looks
# installed.
set -euo pipefail
venv="$1"
wheels="nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-nvjitlink-cu12==12.9.86 \
nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-cccl-cu12==12.9.27 \
nvidia-cuda-cuobjdump==13.2.86 nvidia-cuda-nvdisasm==13.2.86"
stamp=".installed-$(echo "$wheels" | cksum | cut -d' ' -f1)"
[ -f "$venv/$stamp" ] && exit 0
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
if command -v flock >/dev/null; then
  flock 9
fi
# Another process may have installed them while this one waited.
[ -f "$venv/$stamp" ] && exit 0
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  echo "ci: python3 with the venv module is needed to install NVIDIA's wheels (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
echo "ci: installing NVIDIA's CUDA tool wheels into $venv: $wheels" >&2
tmp="$venv.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp"
# shellcheck disable=SC2086
"$tmp/bin/python" -m pip install --quiet --disable-pip-version-check $wheels
touch "$tmp/$stamp"
rm -rf "$venv"
mv "$tmp" "$venv"
trap - EXIT
