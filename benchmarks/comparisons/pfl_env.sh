#!/usr/bin/env bash
# Creates the separate environment in which benchmarks/bench_vs_pfl.py runs Apple's pfl-research simulator.
# pfl is not a dependency of privsilo: it lives in its own venv (default /tmp/privsilo-pfl-venv, or $PFL_VENV),
# so privsilo's environment is untouched. pfl 0.6.0 needs Python >= 3.10, < 3.13; its PyTorch extra takes torch,
# pinned here to the CPU build of constraints-cpu.txt, and the script refuses an environment with CUDA packages.
#
#     bash benchmarks/comparisons/pfl_env.sh            # then: python benchmarks/bench_vs_pfl.py
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${PFL_VENV:-/tmp/privsilo-pfl-venv}"
PFL_VERSION="${PFL_VERSION:-0.6.0}"
TORCH_PIN="$(grep -E '^torch==' constraints-cpu.txt)"

python3 -m venv "$VENV"
"$VENV/bin/pip" install -q -c constraints-cpu.txt "$TORCH_PIN" "pfl[pytorch]==$PFL_VERSION" scikit-learn
if "$VENV/bin/pip" list 2>/dev/null | grep -qiE '^nvidia-|^triton '; then
  echo "pfl_env.sh: CUDA packages were installed into $VENV; expected the CPU build of $TORCH_PIN" >&2
  exit 1
fi
"$VENV/bin/python" -c "import pfl, torch; print(f'$VENV: pfl {pfl.__version__}, torch {torch.__version__}')"
