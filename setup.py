"""The native drafting core, stand_runtime._native (C++17, pybind11; sources in csrc/). Everything
else about the package is in pyproject.toml; pip install -e . builds the extension in place."""

from glob import glob

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

ParallelCompile("STAND_BUILD_JOBS", default=0).install()  # the sources compile side by side (0: all cores)

native = Pybind11Extension(
    "stand_runtime._native",
    sorted(glob("csrc/*.cpp")),
    depends=sorted(glob("csrc/*.hpp")),
    cxx_std=17,
    # -ffp-contract=off: no fused multiply-adds, so every float is the Python reference's
    extra_compile_args=["-O3", "-ffp-contract=off"],
)

setup(ext_modules=[native], cmdclass={"build_ext": build_ext})
