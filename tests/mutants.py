#!/usr/bin/env python3
"""Mutation check of the test suite: apply each curated bug to a scratch copy of the package (and of
its C sources, rebuilt), run the tests that should catch it, and report which mutants the suite
kills. Not part of CI: each C mutant is a rebuild (~20 s) plus its tests.

    python tests/mutants.py                 # every mutant, with its own tests
    python tests/mutants.py --full          # every mutant against the whole suite (slow)
    python tests/mutants.py -k sparse       # the mutants whose name contains "sparse"

A mutant is killed when its tests fail (or crash); one that survives means a bug the suite would
let through. docs/testing.md (Mutation check) keeps the last report.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str      # relative to the repository
    old: str       # must occur exactly once in the file
    new: str
    tests: tuple[str, ...]


GUARDED = ("tests/test_guarded.py",)
MUTANTS = [
    # the record walks' bounds checks (csrc/sparse.c): each stands alone between a lying record and
    # the bytes past it
    Mutant("sparse: expand_block's value bound", "csrc/sparse.c",
           "    if (s->vi >= s->nvalues) return -1;\n", "", GUARDED),
    Mutant("sparse: expand_block's escape bound", "csrc/sparse.c",
           "      if (s->ei >= s->nescapes) return -1;\n", "", GUARDED),
    Mutant("sparse: skip_blocks' value bound", "csrc/sparse.c",
           "  if (nv > s->nvalues - s->vi) return -1;\n", "", GUARDED),
    Mutant("sparse: sparse_expand's value bound", "csrc/sparse.c",
           "      if (vi >= nvalues) return -1;\n", "", GUARDED),
    Mutant("sparse: sparse_expand's table bound", "csrc/sparse.c",
           "    if (t >= ntables) return -1;\n", "", GUARDED),
    Mutant("gather: a record inside its part", "csrc/sparse.c",
           "  if (it->offset > parts[it->part].len || it->nbytes > parts[it->part].len - it->offset) return -1;\n", "",
           GUARDED),
    Mutant("gather: a dense record's size", "csrc/sparse.c",
           "if ((uint64_t)it->nbytes != nb * 128 || it->nvalues != 0 || it->nescapes != 0) return -1;",
           "if (it->nvalues != 0 || it->nescapes != 0) return -1;", GUARDED),
    Mutant("copy_ranges: a range inside its part", "csrc/sparse.c",
           "        r->size > parts[r->part].len - r->src ||", "", GUARDED),
    Mutant("jpeg: the memory source's skip stops at the end", "csrc/dctjpeg.c",
           "  if ((size_t)num_bytes > src->bytes_in_buffer) {", "  if (0) {", GUARDED),
    # maths and tables
    Mutant("colour: a sign of the YCbCr → RGB matrix", "dctnet/kernels/color.py",
           "YCC_TO_RGB = ((1.0, 0.0, 1.402), (1.0, -0.344136, -0.714136)",
           "YCC_TO_RGB = ((1.0, 0.0, 1.402), (1.0, 0.344136, -0.714136)",
           ("tests/test_functional.py", "tests/test_families.py")),
    Mutant("decode: half a grey level added to every pixel", "dctnet/kernels/color.py",
           "    return torch.stack([y + rv * cr, y + gu * cb + gv * cr, y + bu * cb], dim)",
           "    return torch.stack([y + rv * cr, y + gu * cb + gv * cr, y + bu * cb], dim) + 0.5",
           ("tests/test_functional.py",)),
    Mutant("resize: bicubic's a = −0.75 (grid_sample's) for PIL's −0.5", "dctnet/resize.py",
           "    a = -0.5\n", "    a = -0.75\n", ("tests/test_functional.py",)),
    Mutant("policy: torchvision's rotation sign", "dctnet/kernels/policy.py",
           "angle = torch.where(is_[\"Rotate\"], -torch.remainder(arg, 360.0), zero)",
           "angle = torch.where(is_[\"Rotate\"], torch.remainder(arg, 360.0), zero)", ("tests/test_policies.py",)),
    Mutant("policy: RandAugment's TranslateX/Y ranges swapped", "dctnet/transforms/auto_augment.py",
           "\"TranslateX\": (lin(150.0 / 331.0 * width), True), \"TranslateY\": (lin(150.0 / 331.0 * height), True),",
           "\"TranslateX\": (lin(150.0 / 331.0 * height), True), \"TranslateY\": (lin(150.0 / 331.0 * width), True),",
           ("tests/test_policies.py",)),
    Mutant("policy: an AutoAugment table entry", "dctnet/transforms/auto_augment.py",
           "((\"Posterize\", 0.4, 8), (\"Rotate\", 0.6, 9))", "((\"Posterize\", 0.4, 7), (\"Rotate\", 0.6, 9))",
           ("tests/test_policies.py",)),
    Mutant("mixing: Mixup's λ scaled by 0.99", "dctnet/transforms/mixing.py",
           "        lam = _beta(alpha, gen)\n", "        lam = _beta(alpha, gen) * 0.99\n",
           ("tests/test_mixing_erasing.py",)),
]


#: the vendored libjpeg's objects, compiled once per run (no mutant touches them)
_LIBJPEG_OBJECTS: list[str] = []


def _libjpeg_objects(root: Path, build: Path) -> list[str]:
    if not _LIBJPEG_OBJECTS:
        lib = root / "third_party" / "libjpeg-turbo"
        skip = {"jdcolext.c", "jdcol565.c", "jdmrgext.c", "jdmrg565.c", "jstdhuff.c"}  # #included, as setup.py
        build.mkdir(parents=True, exist_ok=True)
        for c in sorted(lib.glob("*.c")):
            if c.name in skip:
                continue
            obj = build / (c.stem + ".o")
            subprocess.run(["gcc", "-c", "-fPIC", "-O2", "-fvisibility=hidden", "-w", f"-I{lib}", str(c), "-o", str(obj)],
                           check=True, capture_output=True, text=True)
            _LIBJPEG_OBJECTS.append(str(obj))
    return _LIBJPEG_OBJECTS


def build_extension(src: Path, out: Path) -> None:
    """The extension from ``src/csrc`` into ``out/dctnet``, with setup.py's sources and flags."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    lib = ROOT / "third_party" / "libjpeg-turbo"
    cmd = ["gcc", "-shared", "-fPIC", "-O2", "-std=gnu11", "-fvisibility=hidden", "-ffp-contract=off",
           f"-I{sysconfig.get_paths()['include']}", f"-I{lib}", *sorted(str(p) for p in (src / "csrc").glob("*.c")),
           *_libjpeg_objects(ROOT, out.parent / "libjpeg-objects"), "-lm", "-o", str(out / "dctnet" / f"_jpeg{suffix}")]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def scratch_copy(work: Path) -> None:
    """The package's Python files and the C sources, copied under ``work`` (the tests stay in place)."""
    shutil.copytree(ROOT / "dctnet", work / "dctnet", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copytree(ROOT / "csrc", work / "csrc")


def apply(work: Path, m: Mutant) -> None:
    path = work / m.path
    text = path.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"mutant {m.name!r}: its text occurs {text.count(m.old)} times in {m.path} (expected once)")
    path.write_text(text.replace(m.old, m.new))


def run_tests(work: Path, tests: tuple[str, ...] | None) -> tuple[bool, str]:
    """Whether the tests fail (the mutant is killed), and the summary line."""
    env = dict(os.environ, PYTHONPATH=str(work))
    check = subprocess.run([sys.executable, "-P", "-c", "import dctnet; print(dctnet.__file__)"], env=env,
                           capture_output=True, text=True, cwd=ROOT)
    if not check.stdout.startswith(str(work)):
        raise SystemExit(f"the scratch package was not picked up: {check.stdout}{check.stderr}")
    cmd = [sys.executable, "-P", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *(tests or ("tests",))]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    why = [line.strip()[2:].strip() for line in lines if line.startswith("E  ")][:1]  # the first assertion line
    summary = (lines[-1:] or [r.stderr[-200:]])[0]
    return r.returncode != 0, summary + (f" — {why[0][:150]}" if why and r.returncode else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="run the whole suite against each mutant")
    ap.add_argument("-k", default="", help="only the mutants whose name contains this")
    args = ap.parse_args()
    chosen = [m for m in MUTANTS if args.k in m.name]
    survived = []
    with tempfile.TemporaryDirectory(prefix="dctnet-mutants-") as tmp:
        base = Path(tmp) / "base"
        scratch_copy(base)
        build_extension(base, base)
        killed, summary = run_tests(base, GUARDED)
        if killed:
            raise SystemExit(f"the unmutated copy fails its tests: {summary}")
        for m in chosen:
            work = Path(tmp) / "m"
            shutil.rmtree(work, ignore_errors=True)
            scratch_copy(work)
            apply(work, m)
            t0 = time.perf_counter()
            build_extension(work, work)
            killed, summary = run_tests(work, None if args.full else m.tests)
            print(f"{'killed  ' if killed else 'SURVIVED'} {m.name:55s} {time.perf_counter() - t0:5.0f} s  {summary}",
                  flush=True)
            if not killed:
                survived.append(m.name)
    print(f"{len(chosen) - len(survived)} of {len(chosen)} mutants killed" +
          (f"; survived: {', '.join(survived)}" if survived else ""))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
