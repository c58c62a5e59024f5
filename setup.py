"""pip install . : the `sparrow` Python module, offline, with Debian's setuptools and pybind11.

    python3 -m venv --system-site-packages .venv && .venv/bin/pip install --no-build-isolation .

builds libsparrow with CMake (into SPARROW_BUILD_DIR, default build/pip/cmake: a directory of its own,
so a developer's build/ and whatever configuration it has, an ASan one say, is never reused; only the
library target),
compiles the pybind11 extension against it and ships libsparrow.so.0 inside the package, next to the
extension (which finds it through an $ORIGIN RUNPATH), so the installed module needs nothing else.
"""

import glob
import os
import shutil
import subprocess

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(ROOT, "build", "pip", "setuptools"), exist_ok=True)  # setup.cfg's build_base / egg_base


def version():
    for line in open(os.path.join(ROOT, "CMakeLists.txt")):
        if line.startswith("project(sparrow VERSION"):
            return line.split("VERSION")[1].split()[0]
    raise RuntimeError("no version in CMakeLists.txt")


class BuildWithCMake(build_ext):
    def run(self):
        build = os.path.abspath(os.environ.get("SPARROW_BUILD_DIR", os.path.join(ROOT, "build", "pip", "cmake")))
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            gen = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release"] + gen)
        jobs = os.environ.get("SPARROW_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", build, "--target", "sparrow", "-j", jobs])
        libdir = os.path.join(build, "lib")
        for ext in self.extensions:
            ext.library_dirs.append(libdir)
        super().run()
        # Ship the library beside the extension (the soname the extension was linked against).
        libs = glob.glob(os.path.join(libdir, "libsparrow.so.0"))
        if not libs:
            raise RuntimeError(f"libsparrow.so.0 not found in {libdir}")
        dest = os.path.join(self.build_lib, "sparrow")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(os.path.realpath(libs[0]), os.path.join(dest, "libsparrow.so.0"))


setup(
    name="sparrow",
    version=version(),
    description="Sparse, bit-exact weight broadcast for RL post-training over Ethernet and WAN",
    packages=["sparrow"],
    package_dir={"": "python"},
    package_data={"sparrow": ["__init__.pyi", "py.typed"]},
    ext_modules=[
        Pybind11Extension(
            "sparrow._sparrow",
            ["python/src/module.cpp"],
            include_dirs=[os.path.join(ROOT, "include")],
            libraries=["sparrow"],
            extra_link_args=["-Wl,-rpath,$ORIGIN"],
            cxx_std=17,
        )
    ],
    cmdclass={"build_ext": BuildWithCMake},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)
