"""LoopViT (models/loopvit.py, loopvit_head.py) against upstream LoopViT's own code, and its presets, counts and exit.

The golden (tests/data/models/golden_loopvit.pt) comes from upstream's LoopARCViT (WenjieShu/LoopViT 4cdbdf4) with
each of its two layers (`loop_vit`: VARC's; `loop_vit1`: the hybrid block), run by
`tests/tools/record_loopvit_goldens.py` in float64 on a 16 x 16 canvas, 4 loop steps, exit allowed from step 2,
in three cases: no dynamic exit, rows exiting at different steps all before the last (upstream's loop breaks early),
and rows exiting at different steps with some never. arcpipe loads upstream's weights under upstream's keys (strict)
and must give its logits, every step's logits, the gate probabilities, the exit steps, the loss's three terms
(pixel cross entropy, negative gate entropy, loop penalty) and every gradient.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from arcpipe.config.arch import LoopViTConfig, make_arch_config
from arcpipe.models.loopvit import LoopViT, loop_regularizers, preset_parameter_count
from arcpipe.models.registry import build_model

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
from record_loopvit_goldens import project_steps  # noqa: E402  (torch only: the directions the golden used)

GOLDEN = Path(__file__).parents[2] / "data" / "models" / "golden_loopvit.pt"
# float64 on both sides; upstream's explicit softmax (loop_vit) and torch's SDPA sum in other orders (~1e-16)
FLOAT64 = dict(atol=1e-9, rtol=1e-9)
IGNORE_INDEX = 10
BLOCKS = ("vit", "hybrid")
CASES = ("fixed", "early", "late")


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return torch.load(GOLDEN, weights_only=False)


def _model(golden: dict[str, Any], block: str, **changes: Any) -> LoopViT:
    # the golden's canvas is 16 pixels, under the 32 that ARC grids need: built without that check
    cfg = LoopViTConfig.model_construct(**{**golden["config"], "block": block, **changes})
    model = LoopViT(cfg, num_tasks=golden["num_tasks"]).double()
    weights = dict(golden["blocks"][block]["weights"])
    weights["step_embed.weight"] = weights["step_embed.weight"][: cfg.max_loop_steps]
    model.load_state_dict(weights, strict=True)
    return model.eval()  # dropout off, as recorded


def _run(golden: dict[str, Any], block: str, case: str, **changes: Any) -> dict[str, Any]:
    data, want = golden["blocks"][block], golden["blocks"][block]["cases"][case]
    model = _model(golden, block, exit_gate_threshold=want["threshold"], **changes)
    out = model(data["pixels"], data["task_ids"], data["mask"], dynamic_exit=want["dynamic_exit"], step_logits=True)
    C = out.logits.shape[1]
    pixel = F.cross_entropy(
        out.logits.permute(0, 2, 3, 1).reshape(-1, C), data["targets"].view(-1), ignore_index=IGNORE_INDEX
    )
    neg_entropy, penalty = loop_regularizers(out, model.config.max_loop_steps)
    weights = golden["weights_of"]
    cfg = model.config
    gate_w = weights["gate_entropy_weight"] if "gate_entropy_weight" not in changes else cfg.gate_entropy_weight
    loop_w = weights["loop_penalty_weight"] if "loop_penalty_weight" not in changes else cfg.loop_penalty_weight
    loss = pixel + gate_w * neg_entropy + loop_w * penalty
    loss.backward()
    ran = int(out.ran_steps)
    return {
        "model": model,
        "out": out,
        "ran": ran,
        "logits": out.logits if case == "fixed" else project_steps(out.logits.detach()[None])[0],
        "step_logits": project_steps(torch.stack(out.step_logits[:ran]).detach()),
        "gate_probs": out.gate_probs[:, :ran],
        "exit_steps": out.exit_steps,
        "pixel_loss": pixel,
        "neg_entropy": neg_entropy,
        "loop_penalty": penalty,
        "loss": loss,
        "grads": {k: p.grad for k, p in model.named_parameters()},
    }


@pytest.mark.numeric
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("block", BLOCKS)
def test_loop_outputs_losses_and_gradients_equal_upstream_golden(golden: dict[str, Any], block: str, case: str) -> None:
    want = golden["blocks"][block]["cases"][case]
    got = _run(golden, block, case)
    assert torch.equal(got["exit_steps"], want["exit_steps"]), (got["exit_steps"], want["exit_steps"])
    assert got["ran"] == want["step_logits"].shape[0] == want["gate_probs"].shape[1]
    for key in ("logits", "step_logits", "gate_probs", "pixel_loss", "neg_entropy", "loop_penalty", "loss"):
        torch.testing.assert_close(got[key].detach(), want[key], **FLOAT64, msg=lambda m, key=key: f"{key}: {m}")
    assert set(got["grads"]) == set(want["grads"])
    for name, grad in want["grads"].items():
        tol = {**FLOAT64, "atol": FLOAT64["atol"] * grad.abs().max().item()}
        torch.testing.assert_close(got["grads"][name], grad, **tol, msg=lambda m, name=name: f"gradient of {name}: {m}")


def test_golden_cases_take_every_exit_path(golden: dict[str, Any]) -> None:
    # what the recorder promised: no exit; distinct exits all before the last step; distinct exits and a row that
    # never exits. The loop penalty then differs by case, and the early case's regularizer sees fewer steps
    for block in BLOCKS:
        cases = golden["blocks"][block]["cases"]
        T = golden["config"]["max_loop_steps"]
        assert cases["fixed"]["exit_steps"].eq(T).all()
        early, late = cases["early"]["exit_steps"], cases["late"]["exit_steps"]
        assert len(set(early.tolist())) >= 2 and early.max() < T
        assert len(set(late.tolist())) >= 2 and late.max() == T
        assert cases["early"]["gate_probs"].shape[1] < T


@pytest.mark.parametrize(
    ("change", "case", "what"),
    [
        (dict(loop_penalty_weight=0.0), "late", "loss"),  # the loop penalty off
        (dict(gate_entropy_weight=0.0), "fixed", "grads"),  # the gate-entropy term off
        (dict(exit_gate_threshold_shift=True), "late", "exit_steps"),  # the exit threshold moved
        (dict(max_loop_steps=3, min_loop_steps=2), "fixed", "logits"),  # one loop step fewer
        (dict(min_loop_steps=1), "early", "exit_steps"),  # exit allowed a step sooner
    ],
)
def test_planted_changes_fail_against_the_golden(golden: dict[str, Any], change: dict, case: str, what: str) -> None:
    block = "hybrid"
    want = golden["blocks"][block]["cases"][case]
    change = dict(change)
    if "exit_gate_threshold_shift" in change:
        # just above the smallest gate that made a row exit: that row now exits later or never
        exits = want["exit_steps"]
        exited = exits < golden["config"]["max_loop_steps"]
        gates = want["gate_probs"][exited, exits[exited] - 1]
        change = {"exit_gate_threshold": gates.min().item() + 1e-9}
        got = _run_with_threshold(golden, block, case, change["exit_gate_threshold"])
    else:
        got = _run(golden, block, case, **change)
    if what == "grads":
        differs = any(not torch.allclose(got["grads"][k], v, **FLOAT64) for k, v in want["grads"].items())
    elif what == "exit_steps":
        differs = not torch.equal(got["exit_steps"], want["exit_steps"])
    else:
        differs = not torch.allclose(got[what].detach(), want[what], **FLOAT64)
    assert differs, f"{change} left {what} equal to upstream's"


def _run_with_threshold(golden: dict[str, Any], block: str, case: str, threshold: float) -> dict[str, Any]:
    data = golden["blocks"][block]
    model = _model(golden, block, exit_gate_threshold=threshold)
    out = model(data["pixels"], data["task_ids"], data["mask"], dynamic_exit=True)
    return {"exit_steps": out.exit_steps}


@pytest.mark.numeric
@pytest.mark.parametrize("block", BLOCKS)
def test_initialisation_draws_upstream_numbers_under_one_seed(golden: dict[str, Any], block: str) -> None:
    torch.manual_seed(golden["init_seed"])
    cfg = LoopViTConfig.model_construct(**{**golden["config"], "block": block})
    model = LoopViT(cfg, num_tasks=golden["num_tasks"])
    data = golden["blocks"][block]
    for key, got in model.state_dict().items():
        want = data["init"].get(key, data["weights"][key])
        torch.testing.assert_close(got.double(), want.double(), atol=1e-6, rtol=1e-6, msg=lambda m, k=key: f"{k}: {m}")


# upstream's count (parameters but the task tokens) of its model at each preset's shape, built by upstream's code
# (LoopARCViT with ARC_ViT's or ARC_ViT1's layer) on the meta device
UPSTREAM_COUNTS = {"script": 11_208_753, "large": 17_541_129, "small": 3_747_825}


@pytest.mark.parametrize("preset", sorted(UPSTREAM_COUNTS))
def test_presets_have_upstream_parameter_counts(preset: str) -> None:
    assert preset_parameter_count(make_arch_config("loopvit", preset, {})) == UPSTREAM_COUNTS[preset]


def test_head_adds_the_regularizers_in_training_only_and_not_at_test_time() -> None:
    torch.manual_seed(0)
    head = build_model(
        make_arch_config("loopvit", "tiny", {"dropout": 0.0}),
        vocab_size=12,
        seq_len=900,
        num_puzzle_identifiers=3,
        batch_size=2,
        device="cpu",
    )
    cfg = head.config
    S = cfg.image_size
    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 10, (2, S, S), generator=g)
    mask = torch.zeros((2, S, S), dtype=torch.bool)
    mask[:, 1:9, 1:9] = True
    ids = torch.tensor([0, 2])
    head.train()
    logits, extra, steps = head.run_model(pixels, ids, mask)
    out = head.model.inner(pixels, ids, mask, dynamic_exit=cfg.train_dynamic_exit)
    neg_entropy, penalty = loop_regularizers(out, cfg.max_loop_steps)
    torch.testing.assert_close(extra, cfg.gate_entropy_weight * neg_entropy + cfg.loop_penalty_weight * penalty)
    assert torch.equal(steps, out.exit_steps)
    head.test_time = True
    _, extra, _ = head.run_model(pixels, ids, mask)
    assert extra is None
    head.eval()
    _, extra, _ = head.run_model(pixels, ids, mask)
    assert extra is None


def _canvas_head(tiny_dataset: Path, **overrides: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    import numpy as np

    from arcpipe.data.dataset import load_split
    from arcpipe.eval.infer import make_batch
    from arcpipe.train.sampler import canvas_draws

    split = load_split(tiny_dataset, "train")
    torch.manual_seed(0)
    head = build_model(
        make_arch_config("loopvit", "tiny", overrides),
        vocab_size=split.metadata.vocab_size,
        seq_len=split.metadata.seq_len,
        num_puzzle_identifiers=split.metadata.num_puzzle_identifiers,
        batch_size=4,
        device="cpu",
    )
    ids = np.repeat(split.puzzle_identifiers, np.diff(split.puzzle_indices)).astype(np.int64)
    batch = make_batch(split.inputs, split.labels, ids, np.arange(4, dtype=np.int64) * 3, 4, torch.device("cpu"))
    batch["canvas_draws"] = torch.from_numpy(canvas_draws(0, 1, np.arange(4)))
    return head, batch


def test_dynamic_exit_step_is_one_graph_without_break_in_training_and_evaluation(tiny_dataset: Path) -> None:
    # the exit as masks: no branch on data, no host sync, so dynamo traces the canvas step whole in both modes
    head, batch = _canvas_head(tiny_dataset, exit_gate_threshold=0.5)
    torch._dynamo.reset()
    try:
        for training in (True, False):
            head.train(training)
            explained = torch._dynamo.explain(head.step)(head.initial_carry(batch), batch, ("preds", "loop_steps"))
            assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    finally:
        torch._dynamo.reset()


def test_dynamic_exit_step_makes_no_host_sync(tiny_dataset: Path) -> None:
    from test_graphs import HostSyncGuard

    head, batch = _canvas_head(tiny_dataset, exit_gate_threshold=0.5)
    guard = HostSyncGuard()
    head.train()
    with guard.active():
        _, loss, _, _ = head.step(head.initial_carry(batch), batch)
        loss.backward()
        head.eval()
        with torch.no_grad():
            head.step(head.initial_carry(batch), batch, ("preds", "loop_steps"))
            head.config = head.config.model_copy(update={"exit_on_entropy_stable": True})  # upstream's entropy exit
            head.step(head.initial_carry(batch), batch, ("preds", "loop_steps"))
    assert guard.seen == []


def test_head_reports_each_rows_loop_steps_and_their_sum(tiny_dataset: Path) -> None:
    # a low threshold: every row may exit at min_loop_steps; the metrics' `steps` is the sum over labelled rows
    head, batch = _canvas_head(tiny_dataset, exit_gate_threshold=1e-6)
    head.eval()
    with torch.no_grad():
        _, _, metrics, outputs = head.step(head.initial_carry(batch), batch, ("loop_steps",))
    cfg = head.config
    assert outputs["loop_steps"].tolist() == [cfg.min_loop_steps] * 4
    assert int(metrics["steps"]) == cfg.min_loop_steps * int(metrics["count"])
    head.config = cfg.model_copy(update={"eval_dynamic_exit": False})
    with torch.no_grad():
        _, _, metrics, outputs = head.step(head.initial_carry(batch), batch, ("loop_steps",))
    assert outputs["loop_steps"].tolist() == [cfg.max_loop_steps] * 4


@pytest.mark.numeric
def test_upstream_checkpoint_imports_answers_upstreams_logits_and_exports_back(
    golden: dict[str, Any], tmp_path: Path
) -> None:
    # a tiny hybrid model built and saved by upstream's code (its trainer's payload: model_state and its arguments),
    # imported with `arcpipe model import --arch loopvit`, answers upstream's logits and exits; exported, it is the
    # same payload again
    from arcpipe.models.io import model_from_checkpoint, read_weights
    from arcpipe.models.upstream_io import export_upstream, import_upstream

    rec = golden["checkpoint"]
    upstream = tmp_path / "loop_vit_base.pt"
    torch.save(rec["payload"], upstream)
    meta = import_upstream("loopvit", upstream, None, tmp_path / "imported.pt")
    assert meta["arch_config"]["block"] == "hybrid" and meta["arch_config"]["max_loop_steps"] == 3
    imported = tmp_path / "imported.pt"
    head, _ = model_from_checkpoint(read_weights(imported), "cpu", source=imported, batch_size=4)
    model = head.model.inner.eval()
    with torch.no_grad():
        out = model(rec["pixels"], rec["task_ids"], rec["mask"], dynamic_exit=True)
    assert torch.equal(out.exit_steps, rec["exit_steps"])
    torch.testing.assert_close(project_steps(out.logits[None])[0], rec["logits"], atol=1e-4, rtol=1e-5)

    export_upstream(tmp_path / "imported.pt", tmp_path / "exported.pt")
    back = torch.load(tmp_path / "exported.pt", weights_only=False)
    want = rec["payload"]
    assert set(back["model_state"]) == set(want["model_state"])
    for key, value in want["model_state"].items():
        assert torch.equal(back["model_state"][key], value), key
    for key, value in want["config"].items():
        assert back["config"][key] == value, key


def test_import_refuses_loop_vit2_by_name(golden: dict[str, Any], tmp_path: Path) -> None:
    from arcpipe.config import ArcpipeError
    from arcpipe.models.upstream_io import import_upstream

    payload = dict(golden["checkpoint"]["payload"])
    payload["config"] = {**payload["config"], "architecture": "loop_vit2"}
    torch.save(payload, tmp_path / "ckpt.pt")
    with pytest.raises(ArcpipeError, match="architecture='loop_vit2'"):
        import_upstream("loopvit", tmp_path / "ckpt.pt", None, tmp_path / "out.pt")


@pytest.mark.parametrize("block", BLOCKS)
def test_forward_flops_at_the_planned_maximum_match_torch_counter(block: str) -> None:
    # models/flops.py counts max_loop_steps passes (the masked exit runs them all); torch's counter on the model in
    # eval mode with dynamic exit on must see exactly that (SDPA's math backend, so attention is counted as matmuls)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from arcpipe.models.flops import eval_flops_per_step

    cfg = make_arch_config("loopvit", "tiny", {"block": block})
    torch.manual_seed(0)
    model = LoopViT(cfg, num_tasks=3).eval()
    S = cfg.image_size
    pixels = torch.randint(0, 10, (2, S, S))
    mask = torch.ones((2, S, S), dtype=torch.bool)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter, torch.no_grad():
        model(pixels, torch.tensor([0, 1]), mask, dynamic_exit=True)
    assert counter.get_total_flops() == eval_flops_per_step(cfg, 900).total * 2


# --------------------------------------------------------------------------------------------------------------
# upstream's entropy exit (--exit-on-entropy-stable, its test-time-training evaluation)


def _upstream_entropy_exit(out: Any, row: int, patience: int, threshold: float) -> int:
    """The rule as upstream's evaluation loop applies it to one row, step by step (utils/eval_utils_ttt.py): the
    mean of the per-pixel entropy over the canvas, counted, reset, stopped at `patience`; the steps its loop ran;
    then the earlier of that and the gate's exit."""
    available = int(out.ran_steps)
    counter, before, exit_at = 0, None, available
    for step in range(available):
        logits = out.step_logits[step][row].float()
        entropy = float(-(F.softmax(logits, dim=0) * F.log_softmax(logits, dim=0)).sum(dim=0).mean())
        if before is not None:
            counter = counter + 1 if (before - entropy) / (before + 1e-8) < threshold else 0
            if counter >= patience:
                exit_at = step + 1
                break
        before = entropy
    return min(exit_at, int(out.exit_steps[row]))


def _scaled_steps(scales: list[list[float]], exits: list[int]) -> Any:
    """A LoopOutput whose rows' per-step logits are one fixed draw times each step's scale (a larger scale, a lower
    entropy): each row's entropy curve chosen, its gate exits as given."""
    from arcpipe.models.loopvit import LoopOutput

    g = torch.Generator().manual_seed(0)
    base = torch.randn(len(scales), 12, 8, 8, generator=g)
    steps = len(scales[0])
    per_step = tuple(base * torch.tensor([row[s] for row in scales]).view(-1, 1, 1, 1) for s in range(steps))
    exit_steps = torch.tensor(exits)
    return LoopOutput(per_step[-1], torch.zeros(len(scales), steps), exit_steps, exit_steps.max(), per_step)


def test_entropy_exit_follows_upstreams_rule_row_by_row() -> None:
    from arcpipe.models.loopvit import entropy_exit_steps

    # each row's entropy curve: settling at once, settling late, falling then settling, settling then a fall (a reset),
    # never settling, settling after its gate exited, and a row whose loop stopped early (the batch's ran_steps)
    scales = [
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        [1.0, 2.0, 4.0, 8.0, 8.1, 8.2],
        [1.0, 3.0, 3.05, 3.1, 9.0, 9.0],
        [1.0, 1.01, 3.0, 3.0, 3.0, 3.0],
        [1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
        [1.0, 2.0, 4.0, 8.0, 8.0, 8.0],
        [1.0, 2.0, 4.0, 4.0, 4.0, 4.0],
    ]
    exits = [6, 6, 6, 6, 6, 3, 5]
    for patience in (1, 2, 3):
        for threshold in (0.0, 0.05, 0.5):
            out = _scaled_steps(scales, exits)
            got = entropy_exit_steps(out, patience, threshold).tolist()
            want = [_upstream_entropy_exit(out, row, patience, threshold) for row in range(len(scales))]
            assert got == want, (patience, threshold)
    out = _scaled_steps(scales, exits)
    assert entropy_exit_steps(out, 2, 0.05).tolist() == [3, 6, 4, 5, 6, 3, 5]  # the rule's cases, spelled out
    # the batch's loop ran 4 steps (every row's gate exited by then): no later step may be chosen
    early = _scaled_steps(scales, [4, 4, 4, 4, 4, 3, 4])
    assert max(entropy_exit_steps(early, 1, 0.5).tolist()) <= 4


def test_entropy_exit_answers_from_the_chosen_step_in_evaluation_only(tiny_dataset: Path) -> None:
    from arcpipe.data import canvas
    from arcpipe.models.loopvit import entropy_exit_steps

    head, batch = _canvas_head(
        tiny_dataset, dropout=0.0, exit_on_entropy_stable=True, entropy_patience=1, entropy_threshold_pct=0.5
    )
    pixels, mask = canvas.encode_inputs(batch["inputs"], head.place(batch), head.config.image_size)
    ids = batch["puzzle_identifiers"].long()
    head.eval()
    with torch.no_grad():
        logits, _, steps = head.run_model(pixels, ids, mask)
        out = head.model.inner(pixels, ids, mask, dynamic_exit=head.config.eval_dynamic_exit, step_logits=True)
        _, _, _, outputs = head.step(head.initial_carry(batch), batch, ("loop_steps",))
    assert steps.tolist() == entropy_exit_steps(out, 1, 0.5).tolist() == outputs["loop_steps"].tolist()
    assert (steps < head.config.max_loop_steps).any()  # at 50% some row settles before the last step
    for row, step in enumerate(steps.tolist()):
        assert torch.equal(logits[row], out.step_logits[step - 1][row])
    assert not torch.equal(logits, out.logits)
    # training never takes it (upstream's trainers do not): the last step's logits, as with the option off
    head.train()
    on, _, _ = head.run_model(pixels, ids, mask)
    head.config = head.config.model_copy(update={"exit_on_entropy_stable": False})
    off, _, _ = head.run_model(pixels, ids, mask)
    assert torch.equal(on, off)
