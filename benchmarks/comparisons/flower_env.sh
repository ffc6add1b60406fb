#!/usr/bin/env bash
# Creates the separate environment in which benchmarks/comparisons/bench_vs_flower.py runs Flower's simulation.
# Flower is not a dependency of privsilo: it lives in its own venv (default /tmp/privsilo-flower-venv, or
# $FLOWER_VENV), so privsilo's environment is untouched. torch is pinned to the CPU build of
# constraints-cpu.txt, and the script refuses an environment in which Flower's Ray pulled CUDA packages.
#
#     bash benchmarks/comparisons/flower_env.sh            # then: python -m benchmarks.comparisons.bench_vs_flower
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${FLOWER_VENV:-/tmp/privsilo-flower-venv}"
# flwr 1.42 needs a certifi release newer than the registry serves here; 1.41 is the newest that installs.
FLWR_VERSION="${FLWR_VERSION:-1.41.0}"
TORCH_PIN="$(grep -E '^torch==' constraints-cpu.txt)"

python3 -m venv "$VENV"
"$VENV/bin/pip" install -q -c constraints-cpu.txt "$TORCH_PIN" "flwr[simulation]==$FLWR_VERSION"
if "$VENV/bin/pip" list 2>/dev/null | grep -qiE '^nvidia-|^triton '; then
  echo "flower_env.sh: CUDA packages were installed into $VENV; expected the CPU build of $TORCH_PIN" >&2
  exit 1
fi
"$VENV/bin/python" -c "import flwr, ray, torch; print(f'$VENV: flwr {flwr.__version__}, ray {ray.__version__}, torch {torch.__version__}')"
