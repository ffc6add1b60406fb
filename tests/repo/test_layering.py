"""mechanisms/ and protocols/ are pure libraries: importing them must not import Ray."""
import subprocess
import sys

from tests.support.paths import REPO


def test_pure_layers_do_not_import_ray():
    code = (
        "import sys, importlib, pkgutil\nfrom privsilo import mechanisms, protocols\n"
        "for pkg in (mechanisms, protocols):\n"
        "    for mod in pkgutil.iter_modules(pkg.__path__):\n"
        "        importlib.import_module(f'{pkg.__name__}.{mod.name}')\n"
        "print('ray' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
