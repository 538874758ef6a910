"""Build the C extension dctnet._jpeg against the system libjpeg (libjpeg-turbo, `libjpeg-dev`).

Metadata lives in pyproject.toml; setuptools still needs this file to declare an extension.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "dctnet._jpeg",
            sources=["csrc/module.c", "csrc/dctjpeg.c", "csrc/sparse.c", "csrc/crop.c"],
            depends=["csrc/dctjpeg.h", "csrc/sparse.h", "csrc/crop.h"],
            libraries=["jpeg", "m"],
            # -O3 lets gcc vectorise the dequantize loop; -fvisibility=hidden keeps our C symbols
            # (and nothing of libjpeg's) out of the module's export table; -ffp-contract=off keeps
            # the crop sampler's arithmetic identical to Python's (no fused multiply-adds).
            extra_compile_args=["-O3", "-std=gnu11", "-fvisibility=hidden", "-ffp-contract=off", "-Wall", "-Wextra",
                                "-Wno-unused-parameter"],
        )
    ],
)
