"""No C walk reads outside its untrusted input: hand-built records and JPEGs that lie about their
counts, each flush against an inaccessible page (``tests/guarded.py``), must be refused in bounds.

A read past a record inside a cache part or a file's buffer lands on the next record and goes unseen
(by a plain run and by ASan alike); against a guard page it is a segfault. The cases run in a child
process (``tests/guarded_cases.py``), which prints each case's name before running it: a crash
fails the test naming the case that read past its input. The fuzzers (``tests/fuzz_reader.py``,
``tests/fuzz_cache.py``) run every C call through the same guards."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def run_cases(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TESTS / "guarded_cases.py"), *args], capture_output=True, text=True,
                          timeout=300, cwd=TESTS)


def last_case(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("case ")]
    return lines[-1][5:] if lines else "(before the first case)"


def test_the_guard_page_catches_a_read_one_byte_past():
    """The harness can fail: one byte read past a guarded buffer kills the child with SIGSEGV."""
    r = run_cases("--self-test")
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stdout, r.stderr[-2000:])
    assert last_case(r.stdout) == "self-test: one byte past a guarded buffer"


def test_lying_records_and_jpegs_are_refused_without_reading_past_them():
    """Sparse records with more mask bits than values, escapes past the end, skipped blocks that
    claim values, a table index past the tables; dense records longer than their part or than their
    planes; byte ranges past their part; JPEG markers longer than the buffer; every cut of small
    files of each layout. Each of the record walk's bounds checks (csrc/sparse.c), the gathers'
    range checks and the memory source's end is what stands between its case and the guard."""
    r = run_cases()
    if r.returncode < 0:
        raise AssertionError(f"read outside its input (signal {-r.returncode}) in case {last_case(r.stdout)!r}:\n"
                             f"{r.stderr[-2000:]}")
    assert r.returncode == 0, f"case {last_case(r.stdout)!r} was not refused:\n{r.stderr[-3000:]}"
    assert r.stdout.splitlines()[-1].startswith("ok: 15 lying inputs refused in bounds"), r.stdout[-500:]
