"""The notebooks run top to bottom (on a few Imagenette photos, or generated ones without ../shared);
their cells assert what they show (fidelity bounds, conversion error)."""

from __future__ import annotations

import shutil

import pytest

from conftest import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 4


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path):
    work = tmp_path / "notebooks"
    work.mkdir()
    shutil.copy(path, work / path.name)
    nb = nbformat.read(work / path.name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT / "notebooks")}})
    try:
        client.execute()
    finally:
        shutil.rmtree(ROOT / "notebooks" / "scratch", ignore_errors=True)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
