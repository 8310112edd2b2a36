"""The native drafting core, stand_runtime._native (C++17, pybind11; sources in csrc/), and the
packages: the folder trees/ installs as the package ``stand_trees`` (a package named ``trees`` was
shadowed by any ``trees/`` folder in the working directory, a natural place for a user's own tree
files, and hid the bundled trees). Everything else about the package is in pyproject.toml;
pip install -e . builds the extension in place."""

from glob import glob

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import find_packages, setup

ParallelCompile("STAND_BUILD_JOBS", default=0).install()  # the sources compile side by side (0: all cores)

native = Pybind11Extension(
    "stand_runtime._native",
    sorted(glob("csrc/*.cpp")),
    depends=sorted(glob("csrc/*.hpp")),
    cxx_std=17,
    # -ffp-contract=off: no fused multiply-adds, so every float is the Python reference's
    extra_compile_args=["-O3", "-ffp-contract=off"],
)

PACKAGES = find_packages(include=["stand_runtime", "stand_runtime.*", "treeopt", "treeopt.*", "treeopt_cli",
                                  "treeopt_cli.*"])

setup(ext_modules=[native], cmdclass={"build_ext": build_ext}, packages=PACKAGES + ["stand_trees"],
      package_dir={"stand_trees": "trees"}, package_data={"stand_trees": ["*.json"]})
