"""Build the C extension dctnet._jpeg with its own libjpeg: libjpeg-turbo 2.1.5's decompressor,
vendored in third_party/libjpeg-turbo (its VENDORED.md says what, from where, and why).

Metadata lives in pyproject.toml; setuptools still needs this file to declare an extension. No
CMake, NASM or system libjpeg is needed: the vendored sources compile into a static library that is
linked into the extension with hidden symbols, so the extension needs no libjpeg at run time and
cannot clash with another libjpeg (Pillow's, the system's) loaded in the same process.
"""
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExtWithLibjpeg(build_ext):
    """`setup.py build_ext --inplace` alone links dctnet_libjpeg too: build it first (pip's builds
    already run build_clib; a bare build_ext does not)."""

    def run(self):
        self.run_command("build_clib")
        super().run()


LIBJPEG = "third_party/libjpeg-turbo"
# .c files that other .c files #include (colour and merged-upsampling variants, the standard Huffman
# tables) are not compiled on their own
INCLUDED = {"jdcolext.c", "jdcol565.c", "jdmrgext.c", "jdmrg565.c", "jstdhuff.c"}
LIBJPEG_SOURCES = sorted(f for f in glob(f"{LIBJPEG}/*.c") if f.rsplit("/", 1)[-1] not in INCLUDED)

setup(
    cmdclass={"build_ext": BuildExtWithLibjpeg},
    libraries=[
        ("dctnet_libjpeg", {
            "sources": LIBJPEG_SOURCES,
            "include_dirs": [LIBJPEG],
            # -fvisibility=hidden: none of libjpeg's symbols leave the extension (its read is as fast as
            # the system's libjpeg-turbo 2.1.5 with these flags: benchmarks/decode.py, both floors)
            "cflags": ["-O3", "-fvisibility=hidden", "-fPIC", "-w"],
        }),
    ],
    ext_modules=[
        Extension(
            "dctnet._jpeg",
            # every C file of csrc/ (tests/fuzz_asan.sh builds the same set with sanitizers)
            sources=sorted(glob("csrc/*.c")),
            # csrc/xxhash/ (vendored xxHash, VENDORED.md) is not compiled on its own: checksum.c includes it
            depends=sorted(glob("csrc/*.h")) + sorted(glob("csrc/xxhash/*.[ch]")) + sorted(glob(f"{LIBJPEG}/*.h")),
            include_dirs=[LIBJPEG],  # before the system's: the vendored jpeglib.h, never /usr/include's
            libraries=["m"],
            # -O3 lets gcc vectorise the dequantize loop; -fvisibility=hidden keeps our C symbols
            # (and nothing of libjpeg's) out of the module's export table; -ffp-contract=off keeps
            # the crop sampler's arithmetic identical to Python's (no fused multiply-adds).
            extra_compile_args=["-O3", "-std=gnu11", "-fvisibility=hidden", "-ffp-contract=off", "-Wall", "-Wextra",
                                "-Wno-unused-parameter"],
        )
    ],
)
