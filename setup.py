"""Builds the blockfp8 Python package: `make lib` first (the C library, with the CUDA backends where nvcc is; CUDA=0
in the environment skips them), then the extension python/blockfp8/_native.c linked with build/libblockfp8.a and
the link line the Makefile uses for its own programs (`make print-ldlibs`)."""
import os
import re
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("BFP8_BUILD_DIR", "build")


def header_version():
    with open(os.path.join(ROOT, "include", "blockfp8.h"), encoding="utf-8") as f:
        return re.search(r'#define BFP8_VERSION "([^"]+)"', f.read()).group(1)


class BuildWithMake(build_ext):
    def run(self):
        jobs = str(max(1, min(os.cpu_count() or 1, 8)))
        make = ["make", "--no-print-directory", f"BUILD={BUILD}"]
        subprocess.check_call(make + [f"-j{jobs}", "lib"], cwd=ROOT)
        ldlibs = subprocess.check_output(make + ["-s", "print-ldlibs"], cwd=ROOT, text=True).split()
        for ext in self.extensions:
            ext.extra_objects = [os.path.join(ROOT, BUILD, "libblockfp8.a")]
            # Relinked whenever the library changes (build_ext compares only `sources` and `depends` by default).
            ext.depends = list(ext.depends) + ext.extra_objects + [os.path.join(ROOT, "include", "blockfp8.h")]
            # The static archives' symbols (libblockfp8, the static CUDA runtime) stay inside the extension and
            # bind to its own copies, never to a libcudart that torch has loaded into the process.
            ext.extra_link_args = ldlibs + ["-Wl,--exclude-libs,ALL", "-Wl,-Bsymbolic"]
        super().run()


setup(
    version=header_version(),
    ext_modules=[
        Extension(
            "blockfp8._native",
            sources=["python/blockfp8/_native.c"],
            include_dirs=[os.path.join(ROOT, "include")],
            extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
        )
    ],
    cmdclass={"build_ext": BuildWithMake},
    options={"build": {"build_base": os.path.join(BUILD, "python")}},
)
