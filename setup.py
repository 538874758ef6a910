"""Build the C extension dctnet._jpeg against the system libjpeg (libjpeg-turbo, `libjpeg-dev`).

Metadata lives in pyproject.toml; setuptools still needs this file to declare an extension.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "dctnet._jpeg",
            sources=["csrc/module.c", "csrc/dctjpeg.c", "csrc/sparse.c"],
            depends=["csrc/dctjpeg.h", "csrc/sparse.h"],
            libraries=["jpeg"],
            # -O3 lets gcc vectorise the dequantize loop; -fvisibility=hidden keeps our C symbols
            # (and nothing of libjpeg's) out of the module's export table.
            extra_compile_args=["-O3", "-std=gnu11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ],
)
