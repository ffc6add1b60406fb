"""privsilo installs one import package, ``privsilo``: the wheel built from this checkout, installed into a fresh
virtual environment, runs a scenario from a directory that holds a researcher's own ``simulator``, ``mechanisms``
and ``protocols`` packages, its model coming from a module inside that ``protocols``."""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from tests.support.paths import REPO
from tests.support.scenarios import small_scenario

USER_PACKAGES = {  # the researcher's own packages, named as privsilo's folders are
    "simulator/__init__.py": "SIMULATOR_OF_MINE = True\n",
    "mechanisms/__init__.py": "MECHANISMS_OF_MINE = True\n",
    "protocols/__init__.py": "PROTOCOLS_OF_MINE = True\n",
    "protocols/my_model.py": (
        "import torch.nn as nn\n\n\n"
        "def make_model(feature_shape, num_classes):\n"
        "    import mechanisms, simulator  # the researcher's, beside privsilo's\n"
        "    assert mechanisms.MECHANISMS_OF_MINE and simulator.SIMULATOR_OF_MINE\n"
        "    width = 1\n"
        "    for size in feature_shape:\n"
        "        width *= size\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(width, num_classes))\n"
    ),
}


def _wheel(tmp_path: Path) -> Path:
    out = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(REPO)], check=True, timeout=600, capture_output=True)
    (wheel,) = out.glob("privsilo-*.whl")
    return wheel


def _fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    """A new virtual environment holding the wheel; privsilo's dependencies come from this interpreter's
    site-packages, added to its path (an added path's own .pth files, this checkout's editable install among
    them, are not read)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, timeout=600, capture_output=True)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


def test_the_wheel_installs_one_import_package(tmp_path):
    wheel = _wheel(tmp_path)
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist() if not name.split("/")[0].endswith(
        (".dist-info", ".data"))}
    assert tops == {"privsilo"}
    venv = _fresh_venv(tmp_path, wheel)
    work = tmp_path / "research"
    for name, text in USER_PACKAGES.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    scenario = small_scenario(model={"name": "protocols.my_model:make_model"},
                              federation={"rounds": 1, "client_rate": 1.0, "local_steps": 2, "batch_size": 32,
                                          "lr": 0.1})
    (work / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    proc = subprocess.run([str(venv / "bin" / "privsilo"), "run", "scenario.yaml", "--no-progress", "--out", "out"],
                          capture_output=True, text=True, cwd=work, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((work / "out" / "summary.json").read_text())
    assert summary["config"]["model"]["name"] == "protocols.my_model:make_model"
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import privsilo.simulator, simulator; "
                            "print(privsilo.simulator.__file__); print(simulator.__file__)"],
                           capture_output=True, text=True, cwd=work, env=env, check=True).stdout.split()
    assert where == [str(venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" /
                         "privsilo" / "simulator" / "__init__.py"), str(work / "simulator" / "__init__.py")]
