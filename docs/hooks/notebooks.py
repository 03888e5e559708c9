"""MkDocs hook: the notebooks of notebooks/ become pages of the site under notebooks/, without copying them.

mkdocs-jupyter renders them as stored (``execute: false`` in mkdocs.yml); this hook only adds each
``notebooks/*.ipynb`` of the repository to the site's files, before mkdocs-jupyter's own ``on_files`` sees them.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

NOTEBOOKS = "notebooks"


@event_priority(100)  # before mkdocs-jupyter wraps the notebooks it finds among the files
def on_files(files: Files, config) -> Files:
    root = Path(config["config_file_path"]).resolve().parent
    for path in sorted((root / NOTEBOOKS).glob("*.ipynb")):
        uri = f"{NOTEBOOKS}/{path.name}"
        if files.get_file_from_path(uri) is None:
            files.append(File(uri, str(root), config["site_dir"], config["use_directory_urls"]))
    return files
