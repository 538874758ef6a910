"""Build the C extension dctnet._jpeg against the system libjpeg (libjpeg-turbo, `libjpeg-dev`).

Metadata lives in pyproject.toml; setuptools still needs this file to declare an extension.
"""
from glob import glob

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "dctnet._jpeg",
            # every C file of csrc/ (tests/fuzz_asan.sh builds the same set with sanitizers)
            sources=sorted(glob("csrc/*.c")),
            depends=sorted(glob("csrc/*.h")),
            libraries=["jpeg", "m"],
            # -O3 lets gcc vectorise the dequantize loop; -fvisibility=hidden keeps our C symbols
            # (and nothing of libjpeg's) out of the module's export table; -ffp-contract=off keeps
            # the crop sampler's arithmetic identical to Python's (no fused multiply-adds).
            extra_compile_args=["-O3", "-std=gnu11", "-fvisibility=hidden", "-ffp-contract=off", "-Wall", "-Wextra",
                                "-Wno-unused-parameter"],
        )
    ],
)
