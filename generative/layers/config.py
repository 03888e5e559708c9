"""What every neural language model in entitylm is configured by."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class LanguageModelConfig:
    """Vocabulary, sizes, dropout and the output softmax, shared by EntityNLM and the RNNLM.

    Sizes as in the paper's grid: embedding and hidden sizes from {32, 48, 64, 128, 256}, dropout {0.2, 0.5}.
    ``softmax`` is "class" (class-factored, ``num_classes`` defaulting to about sqrt(V)) or "full".
    """

    vocab_size: int
    embedding_size: int = 128
    hidden_size: int = 128
    dropout: float = 0.2
    softmax: str = "class"
    num_classes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
