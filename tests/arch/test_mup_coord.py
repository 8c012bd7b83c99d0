"""The coordinate check of μP (Yang et al. 2022, "Tensor Programs V", arXiv:2203.03466, Fig. 5 and Appendix D.1),
run through the `mup` package's own machinery (`mup.coord_check._get_coord_data`: forward hooks record each module's
output statistic at every forward pass) with OUR optimizer: experiments/run/optim.py's AdamW groups, each at
lr x lr_mult as experiments/run/loop.py sets it (our models carry no `infshape`, so the package's own MuAdamW
cannot train them).

Setup: decoders of d_model 64, 128, 256, 512, 1024 (n_heads 4 fixed, so d_head and d_mlp grow with d_model, which
is what arch.mup.base_config assumes), 2 layers, vocab 100, one fixed batch of 4 x 16 random tokens, `STEPS` = 4
AdamW updates at lr 3e-3, base_width 64 for μP. Recorded: the RMS (the package's `l2`) of each block's output
(the residual stream) and of the logits (`lm_head`) in the forward pass after the 4th update, averaged over the
package's seeds, then the least-squares slope of log RMS against log width.

Why the thresholds: at init every block's output has the same size at every width in both parametrizations (gpt2
init: a constant std on the embeddings, LayerNorm before each sublayer), so a slope is the updates'. Under Adam
every entry of a hidden matrix moves by ~lr per step whatever the width, and the move is aligned with the matrix's
input, so it moves the output by ~lr x fan_in: in SP a block's output grows like width^1 per matrix and up to
width^2 through two in series, and the logits, read off the stream after ln_f (RMS 1) by a readout whose entries
move by ~lr, grow up to width^1. μP's lr / fan_in on the hidden matrices and base_width / d_model on the readout's
input cancel exactly these. Measured (decoder, one seed each, 8 seeds of data and init): SP +1.60..+1.76 (blocks),
+0.71..+0.80 (logits); μP -0.04..-0.02 (blocks), -0.11..-0.08 (logits; the init's share of the logits shrinks like
m^-1/2 under the readout multiplier); μP with every lr_mult = 1 +1.53..+1.71 (blocks). Encoder-decoder, one seed:
SP +1.86 / +1.84 / +0.80, μP -0.10 / -0.08 / -0.13 (encoder block, decoder block, logits). So: SP slope > 0.5 on
every recorded layer (0.2 below the smallest seen), μP |slope| < 0.25 (about 2x the largest seen, half of SP's
logits). At lr 1e-2 μP drifts to -0.2 (finite-width effects at the proxy's 64), hence the smaller lr. Without the
lr multipliers the logits stay flat (ln_f renormalises the grown stream, the readout multiplier still applies):
the blocks are what catch a missing lr multiplier; a readout without its multiplier shows in the logits (+0.66).

`mup` is a test-only reference installed by make with --no-deps; its coord_check module needs pandas. Without
either the module skips with the reason. Wall time of the 4 default tests: 16.5 s on 2 cores shared with a
training sweep (load 3.3), 30 s at load ~8; the slow control 2-5 s more.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from arch import EncDecConfig, ModelConfig, build_model
from experiments.config.schema import OptimConfig
from experiments.run.optim import build_optimizer

coord_check = pytest.importorskip("mup.coord_check", reason="mup.coord_check (the mup package, test-only: make "
                                  "installs it with pip --no-deps; it needs pandas)")

WIDTHS = (64, 128, 256, 512, 1024)
BASE = 64  # μP's proxy width, the smallest width
STEPS = 4  # AdamW updates before the recorded forward pass
LR = 3e-3
VOCAB, T, B = 100, 16, 4
SP_MIN = 0.5  # SP: every recorded layer grows at least like width^0.5
MUP_MAX = 0.25  # μP: |slope| below this on every recorded layer


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matmuls (B·T = 64 rows): a second thread only adds synchronisation (10x slower on a loaded 2-core box)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def adamw(model: nn.Module, lr_mults: bool = True) -> torch.optim.Optimizer:
    """experiments/run/optim.py's AdamW, each group at LR x its lr_mult as the training loop sets it (lr_mults=False:
    every group at LR, μP without its lr scaling). No weight decay: over 4 steps it would change nothing."""
    cfg = OptimConfig(name="adamw", lr=LR, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.0, decay_embeddings=False)
    optimizer = build_optimizer(model, cfg, torch.device("cpu"))
    for group in optimizer.param_groups:
        group["lr"] = LR * (group.get("lr_mult", 1.0) if lr_mults else 1.0)
    return optimizer


def slopes(models: dict, batch: tuple, modules: list[str], optcls, nseeds: int) -> dict[str, float]:
    """{module: least-squares slope of log RMS(output) vs log width} in the forward pass after STEPS updates."""
    df = coord_check._get_coord_data(models, [batch], optcls, nsteps=STEPS + 1, flatten_output=True,
                                     filter_module_by_name=lambda name: name in modules, cuda=False, nseeds=nseeds,
                                     output_fdict={"rms": "l2"}, show_progress=False)
    after = df[df.t == STEPS + 1]  # t counts forward passes from 1: pass STEPS + 1 sees STEPS updates
    rms = after.groupby(["module", "width"])["rms"].mean()  # mean over seeds
    out = {}
    for m in modules:
        widths = np.array(rms[m].index, dtype=float)
        out[m] = float(np.polyfit(np.log(widths), np.log(rms[m].to_numpy()), 1)[0])
    return out


def decoder(param: str):
    def make(width: int):
        return lambda: build_model(ModelConfig(vocab_size=VOCAB, n_ctx=T, d_model=width, n_layers=2, n_heads=4,
                                               param=param, base_width=BASE if param == "mup" else None))
    return {w: make(w) for w in WIDTHS}


def decoder_batch() -> tuple[Tensor, Tensor]:
    ids = torch.randint(0, VOCAB, (B, T + 1), generator=torch.Generator().manual_seed(0))
    return ids[:, :-1], ids[:, 1:].reshape(-1)  # inputs (B, T), targets (B*T,) for the flattened logits


DECODER_MODULES = ["blocks.0", "blocks.1", "lm_head"]


def check(param: str, got: dict[str, float]) -> None:
    shown = ", ".join(f"{m} {s:+.2f}" for m, s in got.items())
    if param == "sp":
        assert all(s > SP_MIN for s in got.values()), f"SP should grow with width (slope > {SP_MIN}): {shown}"
    else:
        assert all(abs(s) < MUP_MAX for s in got.values()), f"μP should not (|slope| < {MUP_MAX}): {shown}"


@pytest.mark.parametrize("param", ["sp", "mup"])
def test_decoder_coordinate_check(param):
    check(param, slopes(decoder(param), decoder_batch(), DECODER_MODULES, adamw, nseeds=2))


@pytest.mark.slow
def test_without_its_lr_multipliers_mup_grows_with_width():
    """The check catches the bug it is for: μP's init and multipliers, but every group at the same lr (a control of
    the test itself, hence slow: the μP case above fails the same way when the lr multipliers are lost)."""
    got = slopes(decoder("mup"), decoder_batch(), DECODER_MODULES, lambda m: adamw(m, lr_mults=False), nseeds=1)
    assert got["blocks.0"] > SP_MIN and got["blocks.1"] > SP_MIN, got


class Seq2Seq(nn.Module):
    """The package calls model(data): data is the pair (src, tgt_in) here."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pair: tuple[Tensor, Tensor]) -> Tensor:
        return self.model(*pair)  # (B, T, V)


@pytest.mark.parametrize("param", ["sp", "mup"])
def test_encoder_decoder_coordinate_check(param):
    def make(width: int):
        return lambda: Seq2Seq(build_model(EncDecConfig(
            vocab_size=VOCAB, n_ctx=T, d_model=width, n_encoder_layers=1, n_decoder_layers=1, n_heads=4,
            param=param, base_width=BASE if param == "mup" else None)))

    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(0, VOCAB, (B, T), generator=g), torch.randint(0, VOCAB, (B, T + 1), generator=g)
    modules = ["model.encoder.blocks.0", "model.decoder.blocks.0", "model.lm_head"]
    got = slopes({w: make(w) for w in WIDTHS}, ((src, tgt[:, :-1]), tgt[:, 1:].reshape(-1)), modules,
                 lambda pair: adamw(pair.model), nseeds=1)
    check(param, got)
