"""train.optimizer (AdamW or Adam with L2) and train.decay (which parameters weight decay acts on)."""
from __future__ import annotations

import pytest
import torch

from xmask_cli.engine.training.optimisation import Optimisation, decay_groups
from xmask_cli.engine.training.train_config import TrainConfig
from xmask_cli.errors import UsageError
from xmask_cli.model.network import ModelConfig, XMaskNet


def _model() -> XMaskNet:
    torch.manual_seed(0)
    return XMaskNet(ModelConfig(in_dim=5, out_dim=3, hidden=8, heads=2, layers=2, task="node"))


def _first_step(model: torch.nn.Module, optimizer: str, decay: str, lr: float = 0.01, wd: float = 0.5) -> dict:
    """Parameters after one optimizer step with every gradient set to 0.1 (warm-up off)."""
    opt = Optimisation.build(model, TrainConfig(lr=lr, weight_decay=wd, optimizer=optimizer, decay=decay,
                                                 warmup_epochs=0))
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.1)
    opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _adam_first(w: torch.Tensor, g: torch.Tensor, lr: float, eps: float = 1e-8) -> torch.Tensor:
    # Adam's first step, bias-corrected: m̂ = g, v̂ = g², so the step is lr · g / (|g| + eps).
    return w - lr * g / (g.abs() + eps)


@pytest.mark.parametrize("decay", ["all", "first", "weights"])
@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_one_step_equals_the_hand_update(optimizer: str, decay: str) -> None:
    lr, wd = 0.01, 0.5
    model = _model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    norms = {f"{m}.{k}" for m, mod in model.named_modules() if isinstance(mod, torch.nn.LayerNorm)
             for k in ("weight", "bias")}
    after = _first_step(model, optimizer, decay, lr, wd)
    for name, w in before.items():
        decayed = {"all": True, "first": name.startswith(("encoder.", "blocks.0.")),
                   "weights": not name.endswith(".bias") and name not in norms}[decay]
        g = torch.full_like(w, 0.1)
        if optimizer == "adam":  # L2: the penalty's gradient wd · w joins the loss gradient before Adam
            want = _adam_first(w, g + wd * w if decayed else g, lr)
        else:  # AdamW: decoupled, w ← w (1 - lr · wd), then the Adam step of g
            want = _adam_first(w * (1 - lr * wd) if decayed else w, g, lr)
        torch.testing.assert_close(after[name], want, rtol=1e-6, atol=1e-7, msg=name)


def test_groups_split_the_parameters_as_named() -> None:
    model = _model()
    first, rest = decay_groups(model, "first", 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)].split(".")[0] for p in first["params"]} == {"encoder", "blocks"}
    assert all(names[id(p)].startswith(("encoder.", "blocks.0.")) for p in first["params"])
    assert first["weight_decay"] == 0.1 and rest["weight_decay"] == 0.0
    assert len(first["params"]) + len(rest["params"]) == len(list(model.parameters()))
    weights, others = decay_groups(model, "weights", 0.1)
    assert all(p.dim() == 2 for p in weights["params"]) and all(p.dim() == 1 for p in others["params"])
    with pytest.raises(UsageError, match="train.decay"):
        decay_groups(torch.nn.Linear(2, 2), "first", 0.1)  # no encoder, no blocks: nothing chosen


def test_default_is_adamw_over_all_parameters() -> None:
    opt = Optimisation.build(_model(), TrainConfig())
    assert type(opt.optimizer) is torch.optim.AdamW and len(opt.optimizer.param_groups) == 1
    assert opt.optimizer.param_groups[0]["weight_decay"] == TrainConfig().weight_decay


@pytest.mark.parametrize("decay", ["all", "weights"])
@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_multi_tensor_update_equals_the_per_parameter_loop(optimizer: str, decay: str) -> None:
    # The engine's foreach update and clipping against torch's per-parameter loop (its CPU default), over
    # steps with clipping and varied gradients: bit for bit.
    cfg = TrainConfig(lr=0.01, weight_decay=0.1, optimizer=optimizer, decay=decay, warmup_epochs=0)
    fast, slow = _model(), _model()
    opt = Optimisation.build(fast, cfg)
    groups = decay_groups(slow, decay, cfg.weight_decay) if decay != "all" else [{"params": list(slow.parameters())}]
    kind = torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW
    extra = {"weight_decay": cfg.weight_decay} if decay == "all" else {}
    ref = kind(groups, lr=cfg.lr, foreach=False, **extra)  # type: ignore[arg-type]
    gen = torch.Generator().manual_seed(3)
    for step in range(12):
        for a, b in zip(fast.parameters(), slow.parameters()):
            a.grad = torch.randn(a.shape, generator=gen) * (0.01 if step % 3 else 5.0)  # some steps clipped
            b.grad = a.grad.clone()
        assert opt.clip(fast, 1.0) is None
        torch.nn.utils.clip_grad_norm_(slow.parameters(), 1.0, foreach=False)
        opt.step()
        ref.step()
    for (name, a), b in zip(fast.named_parameters(), slow.parameters()):
        assert torch.equal(a, b), name
    assert any(not torch.equal(a, b) for a, b in zip(fast.parameters(), _model().parameters()))
