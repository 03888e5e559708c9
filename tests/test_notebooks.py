"""The notebooks run headless from top to bottom on small settings (ENTITYLM_NOTEBOOK_SMALL=1)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
# What each notebook prints once its last computation has run.
EXPECTED = {"coref_gru": "coreferent attention", "dynamic_text_model": "mean quantile",
            "entitynlm_tour": "log p_hat(x)", "posterior_coreference": "log p_hat(x)",
            "entity_memory": "memory attention per chunk"}
# The notebooks that read a corpus from $ENTITYLM_DATA (the others use the data bundled in the package).
NEEDS_DATA = {"coref_gru": "babi"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_executes(path: Path, monkeypatch: pytest.MonkeyPatch):
    if path.stem in NEEDS_DATA:
        corpus = NEEDS_DATA[path.stem]
        data = os.environ.get("ENTITYLM_DATA")
        if not data or not (Path(data) / corpus).is_dir():
            reason = "ENTITYLM_DATA is not set" if not data else f"{Path(data) / corpus} does not exist"
            pytest.skip(f"{path.name} needs the {corpus} data under ENTITYLM_DATA: {reason}")
    monkeypatch.setenv("ENTITYLM_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "agg")
    notebook = nbformat.read(path, as_version=4)
    resources = {"metadata": {"path": str(path.parent)}}
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", resources=resources)
    client.execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    assert any(EXPECTED[path.stem] in output.get("text", "") for output in outputs)
