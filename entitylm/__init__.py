"""entitylm, the public name: ``import entitylm as elm`` is the notebook API (:mod:`inference.api`, whose objects
these are) and ``entitylm COMMAND`` / ``python -m entitylm COMMAND`` runs any command (:mod:`entitylm.__main__`).

The API's names are looked up on first use (PEP 562), so ``import entitylm`` and ``entitylm --help`` stay quick:
torch and pyro load with the first model, not with the command line.
"""

from __future__ import annotations

import importlib
from typing import Any

_API = "inference.api"


def __getattr__(name: str) -> Any:
    """``elm.NAME`` is ``inference.api.NAME`` for every public name of the API (``__all__`` included)."""
    api = importlib.import_module(_API)
    if name != "__all__" and name not in api.__all__:
        raise AttributeError(f"module 'entitylm' has no attribute {name!r}")
    value = getattr(api, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *importlib.import_module(_API).__all__})
