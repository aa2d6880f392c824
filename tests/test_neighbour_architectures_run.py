"""Issue 16's keys through every entry point: linear attention, token graying (SVD, DCT), blocks without
LayerNorm, OSA. Each variant pretrains (DINO) and trains (supervised) a step, and its backbone file goes
through the probe, TokenCut, PCA and the conditioning diagnostics in one call per evaluator (tiny models
on a tiny generated set: smoke tests of the wiring; the numerics are tested in test_models_*)."""
import json

import pytest
import torch

from skipless.eval.conditioning import run as conditioning
from skipless.eval.pca import run as pca
from skipless.eval.probe import run as probe
from skipless.eval.tokencut import run as tokencut
from skipless.config import load_config
from skipless.models import create_vit, save_backbone
from skipless.pretrain import pretrain
from skipless.train import train
from skipless.data.generator.synthetic import generate
from tiny_runs import DINO_TINY, SUP_TINY, Losses

# model keys as a config sets them, and the create_vit arguments they mean
VARIANTS = {
    "linear": (["model.attention=linear"], dict(attention="linear")),
    "gray-svd": (["model.token_graying.method=svd"], dict(token_graying={"method": "svd"})),
    "gray-dct": (["model.token_graying.method=dct", "model.token_graying.eps=0.9"],
                 dict(token_graying={"method": "dct", "eps": 0.9})),
    "no-norm": (["model.norm=none", "model.final_norm=false", "model.residual=skipless"],
                dict(norm="none", final_norm=False, residual="skipless")),
    "osa": (["model=osa"], dict(attention="osa", init="osa", residual="skipless", norm="none", final_norm=False)),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    data = generate(root / "data", n_train=2, n_val=3, seed=3, workers=1)
    for name, (_, kwargs) in VARIANTS.items():
        torch.manual_seed(0)
        save_backbone(root / "runs" / name / "backbone.pt", create_vit("vit_tiny", depth=2, img_size=32, **kwargs))
    return root, data


def _ckpt(root):
    return "ckpt=" + " ".join(str(root / "runs" / n) for n in VARIANTS)


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("entry,run,tiny", [("pretrain", pretrain, DINO_TINY), ("train", train, SUP_TINY)])
def test_every_variant_pretrains_and_trains(tmp_path, name, entry, run, tiny):
    rec = Losses()
    cfg = load_config(entry, [*tiny, *VARIANTS[name][0], "train.max_steps=1", f"data.root={tmp_path / 'data'}",
                              f"run.root={tmp_path}", "run.name=v"])
    _, module = run(cfg, extra_callbacks=[rec])
    assert len(rec.values) == 1 and all(torch.isfinite(torch.tensor(rec.values)))
    stored = torch.load(tmp_path / "v" / "backbone.pt", weights_only=True)["args"]
    for key, value in VARIANTS[name][1].items():
        expected = {"eps": 0.95, **value} if key == "token_graying" else value  # eps null: the default
        assert stored[key] == expected


def test_probe_reads_every_variant(runs):
    root, data = runs
    assert probe.main(["dataset=default", f"roots.default={data}", "datasets.default.resolution=32",
                       "datasets.default.train_subset=null", f"runs_root={root / 'runs'}", "epochs=1", "lrs=[1e-2]",
                       "batch_size=2", "num_workers=0", "progress=false", "figure_images=0", "extract_batch_size=2",
                       _ckpt(root)]) == 0
    for name in VARIANTS:
        result = json.loads((root / "runs" / name / "eval" / "probe-default.json").read_text())
        assert 0 <= result["miou"] <= 100 and result["backbone_args"]["arch"] == "vit_tiny"


def test_tokencut_and_pca_read_every_variant(runs):
    root, data = runs
    tokencut.main(["dataset=default", f"roots.default={data}", f"runs_root={root / 'runs'}", "num_workers=0",
                   "figure_images=0", "device=cpu", _ckpt(root)])
    written = pca.run(pca.load_config("pca", [f"runs_root={root / 'runs'}", f"roots.default={data}", "device=cpu",
                                              "image_size=32", "num_images=2", _ckpt(root)]))
    for name in VARIANTS:
        summary = json.loads((root / "runs" / name / "eval" / "tokencut-default.json").read_text())
        assert summary["images"] == 3 and set(summary["corloc"]) == {"0", "1"}
        assert written["blocks"][name].is_file()


def test_conditioning_measures_every_variant(runs):
    root, data = runs
    conditioning.main([f"roots.default={data}", f"runs_root={root / 'runs'}", "device=cpu", "image_size=32",
                       "num_images=2", "layers=[0,1]", "jacobian.image_size=32", "solver.max_iter=20", _ckpt(root)])
    for name in VARIANTS:
        result = json.loads((root / "runs" / name / "eval" / "conditioning.json").read_text())
        assert result["blocks"] == [0, 1] and result["jacobian"]["dim"] == 5 * 192
