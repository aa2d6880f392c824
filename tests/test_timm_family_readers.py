"""Backbones of the timm family (make train MODEL=resnet, convmixer) in the readers: strict save and load, the pooled
feature of k-NN, linear and t-SNE, and one sentence from every reader of ViT tokens (issue 38)."""
import json

import numpy as np
import pytest
import torch

from skipless.eval.knn.run import main as knn_main
from skipless.eval.linear.run import main as linear_main
from skipless.eval.shared.global_features import build_global_features, eval_transform
from skipless.eval.tsne.run import main as tsne_main
from global_fixtures import SMALL, colour_images, register_colours
from skipless.models.backbone_items import resolve_backbones, spec_model
from skipless.models.checkpoint import BackboneLoadError, load_backbone, save_backbone
from skipless.models.timm_family import create_timm_backbone

TINY_RESNET = {"layers": [1, 1, 2, 1], "channels": [8, 8, 16, 16], "stem_width": 8}


def _resnet(folder, seed=0):
    """A decayed ResNet of 5 blocks, its weights and batch-norm statistics moved off their init (so that the
    zero-initialised branches and unit statistics hide nothing), saved as ``<folder>/backbone.pt``."""
    torch.manual_seed(seed)
    model = create_timm_backbone("resnet18", 32, 16, residual="decayed", alpha_min=0.6, timm_args=TINY_RESNET)
    with torch.no_grad():
        for tensor in [*model.parameters(), *(b for n, b in model.named_buffers() if "running" in n)]:
            tensor.add_(0.1 * torch.randn_like(tensor).abs())
    save_backbone(folder / "backbone.pt", model)
    return model.eval(), folder


def test_a_resnet_backbone_loads_strictly_and_computes_what_was_saved(tmp_path):
    model, run = _resnet(tmp_path / "run")
    loaded = load_backbone(run / "backbone.pt").eval()
    x = torch.randn(3, 3, 32, 32)
    assert torch.equal(loaded(x), model(x))
    assert loaded.skipless_args == model.skipless_args and loaded.skipless_args["alpha_min"] == 0.6
    payload = torch.load(run / "backbone.pt", weights_only=True)
    del payload["state_dict"]["layer3.1.conv1.weight"]
    torch.save(payload, tmp_path / "broken.pt")
    with pytest.raises(BackboneLoadError, match=r"does not match the architecture resnet18 it names: 1 missing keys "
                                                r"\(layer3.1.conv1.weight\)"):
        load_backbone(tmp_path / "broken.pt")


def test_the_random_floor_of_a_resnet_is_the_same_model_drawn_from_the_seed(tmp_path):
    _, run = _resnet(tmp_path / "runs" / "run")
    specs = resolve_backbones(f"{run} random", tmp_path / "runs", families=("vit", "timm"))
    assert specs[1].out_dir == tmp_path / "runs" / "random-resnet18-decayed" / "eval"
    first, again, other = spec_model(specs[1], seed=3), spec_model(specs[1], seed=3), spec_model(specs[1], seed=4)
    assert first.state_dict().keys() == load_backbone(run / "backbone.pt").state_dict().keys()
    assert torch.equal(first.conv1.weight, again.conv1.weight) and not torch.equal(first.conv1.weight, other.conv1.weight)


def test_the_global_feature_of_a_cnn_is_its_pooled_output_and_it_has_no_cls_token(tmp_path):
    model, _ = _resnet(tmp_path)
    data = colour_images("val", 2)
    # 64 px: the last stage's map is 2 x 2, so its pooling is not the identity
    feats = build_global_features(model, data, n_last=0, resize=64, crop=64, progress=False)
    images = torch.stack([eval_transform(64, 64)(data.read(i)[0]) for i in range(len(data))])
    expected = model(images).detach().numpy()  # timm's pooled output (num_classes=0), computed here without the cache
    assert feats.cls.shape == (12, 0, 16) and np.allclose(feats.pooled, expected, atol=1e-5)
    assert np.array_equal(feats.avgpool, feats.pooled)  # a ResNet's pooled feature is its last stage's average


def test_knn_linear_and_tsne_read_the_pooled_feature(tmp_path, monkeypatch, capsys):
    register_colours(monkeypatch)
    _, run = _resnet(tmp_path / "runs" / "resnet")
    common = ["dataset=colours", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}", *SMALL]
    knn_main([*common, "ks=[3]", "report_k=3", "random_floor=false"])
    knn = json.loads((run / "eval" / "knn-colours.json").read_text())
    assert knn["model"]["arch"] == "resnet18" and knn["model"]["cls_blocks"] == [] and knn["val_images"] == 12
    linear_main([*common, "inputs=[pooled]", "lrs=[0.1]", "epochs=2", "random_floor=false"])
    linear = json.loads((run / "eval" / "linear-colours.json").read_text())
    assert linear["groups"]["pooled"]["dim"] == 16  # the last stage's width, the ResNet's num_features
    tsne_main([*common, "feature=pooled", "perplexity=3", "random_floor=false"])
    assert (run / "eval" / "tsne-pooled-colours.png").is_file()
    assert "(cached)" in capsys.readouterr().out  # linear and t-SNE read the features k-NN cached


@pytest.mark.parametrize("main, args, says", [
    (linear_main, [], r"^error: resnet is a resnet18 \(model.family=timm\) without a CLS token, and inputs=\['cls', "
                      r"'cls\+avgpool'\] reads CLS tokens; expected inputs=\[pooled\]"),
    (tsne_main, [], r"^error: resnet is a resnet18 \(model.family=timm\) without a CLS token, and feature=cls reads CLS "
                    r"tokens; expected feature=pooled"),
])
def test_the_cls_settings_refuse_a_cnn_before_any_feature(tmp_path, monkeypatch, main, args, says):
    register_colours(monkeypatch)
    _, run = _resnet(tmp_path / "runs" / "resnet")
    with pytest.raises(SystemExit, match=says):
        main(["dataset=colours", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}", *SMALL, *args])
    assert not (run / "eval").exists()


@pytest.mark.parametrize("reader", ["probe", "tokencut", "pca"])  # conditioning reads CNN blocks (its own tests)
def test_the_readers_of_vit_tokens_refuse_a_cnn_in_one_sentence(tmp_path, reader):
    import importlib
    _, run = _resnet(tmp_path / "runs" / "resnet")
    main = importlib.import_module(f"skipless.eval.{reader}.run").main
    with pytest.raises(SystemExit, match=r"^error: resnet is a resnet18 \(model.family=timm\), and this command "
                                                r"reads ViT backbones only .*; expected a ViT backbone, or make knn"):
        main([f"ckpt={run}", f"runs_root={tmp_path / 'runs'}"])
    assert not (run / "eval").exists()


def test_make_finetune_refuses_a_cnn_before_its_run_folder(tmp_path, capsys):
    from skipless.finetune import main as finetune_main
    _, run = _resnet(tmp_path / "runs" / "resnet")
    assert finetune_main([f"finetune.ckpt={run}", f"run.root={tmp_path / 'out'}"]) != 0
    assert "error: resnet is a resnet18 (model.family=timm), and this command reads ViT backbones only" in \
        capsys.readouterr().err
    assert not (tmp_path / "out").exists()
