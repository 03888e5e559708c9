"""The CUDA path (``--device cuda``): what runs on a GPU gives what the CPU gives, to float rounding where nothing
is drawn and to Monte Carlo spread where something is. Marked ``cuda``: skipped on a machine without a GPU (CI),
run by ``benchmarks/gpu_check.sh`` where there is one."""

from __future__ import annotations

import math

import pytest
import torch

from coref.corpora.preprocess import EOS
from generative.layers.batch import make_batch
from inference.algorithms.smc import sample_structures
from inference.data import prepared_documents
from inference.runtime import resolve_device, set_seed
from inference.training.checkpoint import (
    Checkpoint,
    entitynlm_checkpoint,
    entitynlm_modules,
    language_model,
    pretrained,
)
from inference.training.train import LanguageModelTraining, train_language_model

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")]


def trained(tmp_path, device: str, precision: str = "fp32") -> Checkpoint:
    out = tmp_path / f"{device}-{precision}"
    train_language_model(LanguageModelTraining("entitynlm", out, embedding_size=16, hidden_size=16, dropout=0.0,
                                               new_entity_scale=0.0, epochs=2, device=device, precision=precision),
                         report=lambda record: None)
    return Checkpoint.load(out / "last.pt")


def test_entitynlm_trains_on_the_gpu_as_on_the_cpu(tmp_path):
    cpu, gpu = trained(tmp_path, "cpu"), trained(tmp_path, "cuda")
    for part, weights in cpu.weights.items():
        for name, value in weights.items():
            assert torch.allclose(value, gpu.weights[part][name], atol=1e-4), (part, name)


def test_bf16_autocast_trains_and_lowers_the_loss(tmp_path):
    history = trained(tmp_path, "cuda", "bf16").training["state"]["history"]
    first, last = history[0]["train_nll"]["model"], history[-1]["train_nll"]["model"]
    assert math.isfinite(last) and last < first


def test_the_rnnlm_scores_on_the_gpu_as_on_the_cpu():
    checkpoint = Checkpoint.load(pretrained("rnnlm.pt"))
    documents = prepared_documents("sample", "test", None, checkpoint.preprocess, checkpoint.vocabulary, quiet=True)
    batch = make_batch(documents, checkpoint.vocabulary)
    with torch.no_grad():
        on_cpu = language_model(checkpoint, torch.device("cpu")).log_likelihood(batch)
        on_gpu = language_model(checkpoint, resolve_device("cuda")).log_likelihood(batch.to("cuda")).cpu()
    assert torch.allclose(on_cpu, on_gpu, rtol=1e-4)


def test_smc_on_the_gpu_estimates_what_the_cpu_estimates():
    _, checkpoint = entitynlm_checkpoint(None)
    documents = prepared_documents("sample", "test", None, checkpoint.preprocess, checkpoint.vocabulary, quiet=True)
    estimates = {}
    for device in ("cpu", "cuda"):
        model, proposal = entitynlm_modules(checkpoint, resolve_device(device))
        batch = make_batch(documents, checkpoint.vocabulary).to(device)
        set_seed(0)
        sampled = sample_structures(model, proposal, batch, 1000, checkpoint.vocabulary.index(EOS), history=False)
        estimates[device] = sampled.log_marginal.sum().item()
    tokens = sum(len(document.tokens) + len(document.sentences) for document in documents)
    assert abs(estimates["cpu"] - estimates["cuda"]) / tokens < 0.02  # nats per token: Monte Carlo spread
