"""The CUDA path (``--device cuda``): what runs on a GPU gives what the CPU gives, to float rounding where nothing
is drawn and to Monte Carlo spread where something is. Marked ``cuda``: skipped on a machine without a GPU (CI),
run by ``benchmarks/gpu_check.sh`` where there is one."""

from __future__ import annotations

import math

import pyro
import pytest
import torch

from coref.corpora.preprocess import EOS
from generative.entitynlm.lockstep import EntityNLMParticles
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
from tests.test_entitynlm import EOS as TINY_EOS
from tests.test_entitynlm import WORDS, exact_log_marginal, tiny_batch, tiny_models

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")]


def trained(tmp_path, device: str, precision: str = "fp32", family: str = "entitynlm") -> Checkpoint:
    out = tmp_path / f"{family}-{device}-{precision}"
    train_language_model(LanguageModelTraining(family, out, embedding_size=16, hidden_size=16, dropout=0.0,
                                               new_entity_scale=0.0, epochs=2, device=device, precision=precision),
                         report=lambda record: None)
    return Checkpoint.load(out / "last.pt")


@pytest.fixture
def no_tf32():
    """Full float32 on the GPU: cuDNN's LSTM otherwise rounds its products to TF32 (PyTorch's default on Ampere
    and newer), and two epochs of that moved the weights by more than 1e-4 on an H200."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_entitynlm_trains_on_the_gpu_as_on_the_cpu(tmp_path, no_tf32):
    cpu, gpu = trained(tmp_path, "cpu"), trained(tmp_path, "cuda")
    for part, weights in cpu.weights.items():
        for name, value in weights.items():
            assert torch.allclose(value, gpu.weights[part][name], atol=1e-4), (part, name)


@pytest.mark.parametrize("family", ["entitynlm", "rnnlm", "dntm"])
def test_bf16_autocast_trains_and_lowers_the_loss(tmp_path, family):
    """Every family under CUDA's autocast (the DNTM's grid once failed there, in an out-of-place index_put)."""
    history = trained(tmp_path, "cuda", "bf16", family).training["state"]["history"]
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


def test_smc_on_the_gpu_converges_to_the_enumerated_marginal():
    """The GPU's SMC (token resampling) is exact: 60,000 particles of the tiny model come within 0.03 nats of
    the enumerated log p(x), the CPU's own test (tests/test_hints.py). Comparing one GPU run with one CPU run
    of the bundled model could not be told from Monte Carlo spread (1-2 nats at 1,000 particles)."""
    model, proposal = tiny_models()
    exact, _, _ = exact_log_marginal(model, WORDS)
    batch = tiny_batch([{"words": WORDS}]).to("cuda")
    pyro.set_rng_seed(3)
    system = EntityNLMParticles(model.to("cuda"), proposal.to("cuda"), batch, 60_000)
    sampled = sample_structures(system, TINY_EOS, "token", ess_threshold=0.5, history=False)
    assert sampled.log_marginal.item() == pytest.approx(exact.item(), abs=0.03)


def test_the_bundled_entitynlm_samples_on_the_gpu():
    """The bundled model and proposal run their SMC on the GPU: a finite estimate per document, within the
    CPU's range of a few nats per document of it (seeds differ by 1-2 nats on the sample)."""
    _, checkpoint = entitynlm_checkpoint(None)
    documents = prepared_documents("sample", "test", None, checkpoint.preprocess, checkpoint.vocabulary, quiet=True)
    estimates = {}
    for device in ("cpu", "cuda"):
        model, proposal = entitynlm_modules(checkpoint, resolve_device(device))
        batch = make_batch(documents, checkpoint.vocabulary).to(device)
        set_seed(0)
        system = EntityNLMParticles(model, proposal, batch, 1000)
        sampled = sample_structures(system, checkpoint.vocabulary.index(EOS), history=False)
        estimates[device] = sampled.log_marginal.cpu()
    assert torch.isfinite(estimates["cuda"]).all()
    tokens = sum(len(document.tokens) + len(document.sentences) for document in documents)
    assert (estimates["cpu"] - estimates["cuda"]).abs().sum() / tokens < 0.1  # nats per token
