"""The one thing ``pyproject.toml`` cannot say: the wheel carries ``configs/`` (the YAML defaults, kept at the
repository root where users edit them) as the package data ``skipless/configs/``, where ``skipless.config`` finds
them in an installed copy. ``packages.find`` cannot add a package that lies outside ``src/``, so the packages and
their folders are listed here; everything else is in ``pyproject.toml``."""
from setuptools import find_packages, setup

setup(packages=[*find_packages("src"), "skipless.configs"],
      package_dir={"": "src", "skipless.configs": "configs"})
