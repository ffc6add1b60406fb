"""privsilo installs one import package, ``privsilo``: its facade (``privsilo/``) and the folders at the
repository root as its subpackages (``simulator/`` as ``privsilo.simulator``, ``mechanisms/`` as
``privsilo.mechanisms``, ``protocols/`` as ``privsilo.protocols``). Everything else is in pyproject.toml."""
from setuptools import find_packages, setup

FOLDERS = ("simulator", "mechanisms", "protocols")

setup(
    packages=["privsilo"] + [f"privsilo.{name}" for name in find_packages(include=[f"{folder}*" for folder in FOLDERS])],
    package_dir={"privsilo": "privsilo", **{f"privsilo.{folder}": folder for folder in FOLDERS}},
)
