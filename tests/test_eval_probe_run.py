"""``python -m skipless.eval.probe`` end to end on a tiny VOC-layout fixture with tiny backbones (CPU, seconds)."""
import json

import numpy as np
import pytest
import torch
from PIL import Image

from skipless.eval.probe.miou import ConfusionMatrix
from skipless.eval.probe.run import main
from skipless.eval.shared.lr_sweep import sweep_edge
from skipless.eval.probe.settings import round_to_patch, spread_layers
from skipless.data.segmentation.interface import VOCSegDataset
from skipless.models import create_vit, save_backbone

from seg_fixtures import write_voc

CLASSES = ["background", "disc", "square", "star"]


@pytest.fixture()
def setup(tmp_path):
    data = write_voc(tmp_path / "data", n_train=8, n_val=5, classes=CLASSES)
    torch.manual_seed(0)
    save_backbone(tmp_path / "runs" / "tiny" / "backbone.pt",
                  create_vit("vit_tiny", residual="skipless", init="timm", depth=2, img_size=32))  # cutskip: 4 s
    args = [f"roots.default={data}", "datasets.default.resolution=32", "datasets.default.label_size=null",
            "datasets.default.train_subset=null",
            f"runs_root={tmp_path / 'runs'}", "epochs=2", "lrs=[1e-3,1e-2]", "batch_size=4", "num_workers=0",
            "progress=false", "figure_images=2", "val_every=1", "extract_batch_size=4"]
    return tmp_path, data, args


def test_probe_writes_results_figure_table_and_predictions_that_rescore(setup):
    tmp, data, args = setup
    runs = tmp / "runs"
    assert main(args + [f"ckpt={runs / 'tiny'} random", "multiscale=both", "save_predictions=true"]) == 0
    val = VOCSegDataset(data, "val", name="default")
    for out in (runs / "tiny" / "eval", runs / "random-vit_tiny-skipless-timm" / "eval"):
        for stem, layers in (("probe-default", [1]), ("probe-default-ms", [0, 1])):
            result = json.loads((out / f"{stem}.json").read_text())
            assert result["layers"] == layers and result["resolution"] == 32 and result["label_size"] == 8
            assert [s["lr"] for s in result["sweep"]] == [1e-3, 1e-2] and result["best_lr"] in (1e-3, 1e-2)
            assert result["miou"] == max(s["miou"] for s in result["sweep"])
            # two lrs: the best is one end of the sweep, and the result says which
            assert result["best_lr_at_edge"] == {1e-3: "lowest", 1e-2: "highest"}[result["best_lr"]]
            assert set(result["per_class_iou"]) == set(CLASSES) and result["n_val"] == 5
            assert result["config"]["dataset"] == "default" and result["timings"]["total_s"] > 0
            assert sorted(result["monitor_miou_at_label_size"]) == ["1", "2"]
            assert (out / f"{stem}.png").is_file() and (out / f"{stem}-head.pt").is_file()
            assert list((out / "tb" / stem).glob("events.out.tfevents.*"))
            # every val prediction, saved as a palette PNG named like its image, scores the reported mIoU
            pred_dir = out / f"{stem}-pred"
            assert sorted(p.stem for p in pred_dir.glob("*.png")) == sorted(val.ids)
            conf = ConfusionMatrix(len(CLASSES))
            for i, image_id in enumerate(val.ids):
                png = Image.open(pred_dir / f"{image_id}.png")
                assert png.mode == "P" and png.size == val.image(i).size
                conf.update(val.mask(i), np.array(png))
            assert round(100 * conf.miou(), 4) == pytest.approx(result["miou"], abs=1e-9)
            per_class = {c: (None if np.isnan(v) else round(100 * v, 4)) for c, v in zip(CLASSES, conf.iou())}
            assert per_class == result["per_class_iou"]
        if "random" in out.parent.name:  # the random floor's features are kept for the next probe of its kind
            assert len(list((out / "cache").glob("probe-default-*/meta.json"))) == 2
        else:
            assert not (out / "cache").exists(), "keep_cache=false removes the caches it built, and their folder"
    table = (runs / "compare" / "probe-default-both.md").read_text()
    assert "| tiny | skipless | timm |" in table and "| random |" in table
    assert "single mIoU" in table and "multiscale mIoU" in table
    assert checkpoint_in(runs / "tiny" / "eval" / "probe-default.json", runs / "tiny" / "backbone.pt")


def test_single_and_multiscale_tables_do_not_overwrite_each_other(setup):
    tmp, _, args = setup
    runs = tmp / "runs"
    two = [f"ckpt={runs / 'tiny'} random", "figure_images=0"]
    main(args + two)
    main(args + two + ["multiscale=1"])
    single, ms = (runs / "compare" / "probe-default.md").read_text(), (runs / "compare" / "probe-default-ms.md").read_text()
    assert "single mIoU" in single and "multiscale" not in single
    assert "multiscale mIoU" in ms and "single" not in ms


def test_dataset_size_is_rounded_to_the_patch_unless_set(setup):
    """A /14 backbone on the default data: 32 px rounds to 28 (said in the JSON); resolution=32 is refused."""
    tmp, _, args = setup
    torch.manual_seed(0)
    save_backbone(tmp / "runs" / "p14" / "backbone.pt",
                  create_vit("vit_tiny", residual="skip", depth=1, img_size=28, patch_size=14))
    main(args + [f"ckpt={tmp / 'runs' / 'p14'}", "figure_images=0", "epochs=1"])
    result = json.loads((tmp / "runs/p14/eval/probe-default.json").read_text())
    assert result["resolution"] == 28 and result["feature_grid"] == [2, 2] and result["label_size"] == 7
    assert "32 px rounded to 28 px" in result["resolution_note"]
    with pytest.raises(SystemExit, match="resolution 32 is not a multiple of the patch size 14; use 28"):
        main(args + [f"ckpt={tmp / 'runs' / 'p14'}", "resolution=32"])
    assert [round_to_patch(160, 14), round_to_patch(160, 16), round_to_patch(448, 14), round_to_patch(5, 14)] == \
        [154, 160, 448, 14]


def checkpoint_in(json_path, backbone):
    return json.loads(json_path.read_text())["checkpoint"] == str(backbone)


def test_kept_cache_is_reused_with_the_same_result(setup, capsys):
    tmp, _, args = setup
    ckpt = f"ckpt={tmp / 'runs' / 'tiny'}"
    main(args + [ckpt, "keep_cache=true", "figure_images=0", "random_floor=false"])
    first = json.loads((tmp / "runs/tiny/eval/probe-default.json").read_text())
    assert len(list((tmp / "runs/tiny/eval/cache").glob("probe-default-*/meta.json"))) == 2
    main(args + [ckpt, "keep_cache=true", "figure_images=0", "random_floor=false"])
    second = json.loads((tmp / "runs/tiny/eval/probe-default.json").read_text())
    assert second["timings"]["cache_reused"] and not first["timings"]["cache_reused"]
    assert second["miou"] == first["miou"] and second["sweep"] == first["sweep"]
    assert "table written" not in capsys.readouterr().out  # one backbone: printed, not saved


def test_flip_augmentation_caches_a_mirrored_view(setup):
    tmp, _, args = setup
    main(args + [f"ckpt={tmp / 'runs' / 'tiny'}", "augmentation=flip", "keep_cache=true", "figure_images=0"])
    caches = sorted(p.parent.name.rsplit("-", 1)[0] for p in (tmp / "runs/tiny/eval/cache").glob("*/meta.json"))
    assert caches == ["probe-default-train", "probe-default-train-mirrored", "probe-default-val"]
    result = json.loads((tmp / "runs/tiny/eval/probe-default.json").read_text())
    assert result["config"]["augmentation"] == "flip" and result["n_train"] == 8


@pytest.mark.parametrize("extra, message", [
    (["dataset=pascal"], "expected one of: default, voc, ade20k, cocostuff"),
    (["dataset=voc", "roots.voc=/nowhere"], "VOCdevkit/VOC2012"),
    (["multiscale=2"], "multiscale must be one of 0, 1, both, got 2"),
    (["resolution=30"], "not a multiple of the patch size 16"),
    (["lyaer=3"], "unknown config key 'lyaer'"),
    (["augmentation=crop"], "augmentation must be one of none, flip, got 'crop'"),
    (["layers=5"], "out of range"),
    (["lrs=[]"], "lrs must be a non-empty list of finite numbers > 0, got []"),
    (["optimizer=lion"], "optimizer must be one of adamw, sgd, got 'lion'"),
    (["device=cuda:7"] if not torch.cuda.is_available() else ["device=tpu"], "device"),
])
def test_bad_input_is_one_clear_error(setup, extra, message):
    tmp, _, args = setup
    with pytest.raises(SystemExit) as err:
        main(args + [f"ckpt={tmp / 'runs' / 'tiny'}"] + extra)
    text = str(err.value)
    assert text.startswith("error: ") and message in text and "\n" not in text


def test_multiscale_blocks_are_spread_over_the_depth():
    assert spread_layers(12, 4) == [2, 5, 8, 11]
    assert spread_layers(12, 1) == [11] and spread_layers(6, 3) == [1, 3, 5] and spread_layers(2, 4) == [0, 1]


def test_sweep_edge_flags_an_edge_lr_only_when_it_is_strictly_best():
    lrs = [1e-4, 1e-3, 1e-2]
    assert sweep_edge(lrs, [0.5, 0.4, 0.3]) == "lowest" and sweep_edge(lrs, [0.3, 0.4, 0.5]) == "highest"
    assert sweep_edge(lrs, [0.3, 0.5, 0.4]) is None
    assert sweep_edge([1e-2, 1e-3, 1e-4], [0.5, 0.4, 0.3]) == "highest"  # by value, not position
    assert sweep_edge([1e-3], [0.5]) is None
    # every lr ties (a 3-class set at 100%), or an inner lr ties with the edge: the sweep holds an optimum
    assert sweep_edge(lrs, [1.0, 1.0, 1.0]) is None and sweep_edge(lrs, [0.3, 0.5, 0.5]) is None
    assert sweep_edge(lrs, [float("nan"), 0.2, None]) is None and sweep_edge(lrs, [None, None, 0.1]) == "highest"


def test_sweep_edge_needs_a_rise_towards_the_edge_and_a_gain_above_the_margin():
    lrs = [1e-4, 1e-3, 1e-2, 1e-1]
    assert sweep_edge(lrs, [0.40, 0.41, 0.42, 0.45]) == "highest"
    assert sweep_edge(lrs, [0.40, 0.45, 0.41, 0.452]) is None  # dips and recovers: the peak is inside
    assert sweep_edge(lrs, [0.452, 0.41, 0.45, 0.40]) is None
    assert sweep_edge(lrs, [0.40, 0.41, 0.42, 0.423], margin=0.005) is None  # within the noise
    assert sweep_edge(lrs, [0.40, 0.41, 0.42, 0.43], margin=0.005) == "highest"
    assert sweep_edge(lrs, [(50.0, 80.0), (51.0, 81.0), (52.0, 82.0), (52.05, 83.0)], margin=0.1) is None
    assert sweep_edge(lrs[:2], [0.40, 0.45]) == "highest"  # two lrs: no trend to ask for


def test_bench_naive_probe_matches_the_cached_one(setup):
    """The benchmark's two ways (cache vs backbone every step) train the same head to the same mIoU."""
    from bench.probe_sweep import bench_probe
    tmp, data, _ = setup
    r = bench_probe(quick=True, ckpt=str(tmp / "runs" / "tiny"), root=str(data), num_workers=0)
    assert r["n_train"] == 8 and r["naive"]["lr"] == r["cached"]["best_lr"]
    assert r["naive"]["miou"] == pytest.approx(r["cached"]["best_miou"], abs=0.5)
    assert r["naive"]["sweep_total_s_extrapolated"] == pytest.approx(4 * r["naive"]["one_lr_total_s"])


def test_widening_the_sweep_upwards_leaves_the_first_heads_unchanged(setup):
    """Heads are drawn in lr order and train independently: appending lrs keeps the earlier heads' scores,
    so the best mIoU of a wider sweep can only stay or rise (the 3e-2 and 1e-1 added to the default)."""
    tmp, _, args = setup
    ckpt = f"ckpt={tmp / 'runs' / 'tiny'}"
    main(args + [ckpt, "figure_images=0"])
    narrow = json.loads((tmp / "runs/tiny/eval/probe-default.json").read_text())
    main(args + [ckpt, "figure_images=0", "lrs=[1e-3,1e-2,3e-2,1e-1]"])
    wide = json.loads((tmp / "runs/tiny/eval/probe-default.json").read_text())
    assert [s["lr"] for s in wide["sweep"]] == [1e-3, 1e-2, 3e-2, 1e-1]
    for a, b in zip(narrow["sweep"], wide["sweep"]):
        assert b["miou"] == pytest.approx(a["miou"], abs=1e-3) and b["final_train_loss"] == pytest.approx(
            a["final_train_loss"], rel=1e-5)
    assert wide["miou"] >= narrow["miou"] - 1e-3


def test_the_example_figure_has_a_legend_of_the_classes_it_shows():
    from PIL import Image as PILImage

    from skipless.eval.probe.figures import draw_examples

    names = ("background", "cat", "dog", "car", "bus")
    target = np.array([[0, 1], [255, 1]], dtype=np.uint8)
    pred = np.array([[0, 3], [3, 1]], dtype=np.uint8)
    fig = draw_examples([PILImage.new("RGB", (2, 2))], [target], [pred], ["img0"], "heading", names)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["background", "cat", "car", "ignored"]  # no dog, no bus
    assert all(t.get_fontsize() >= 8 for t in legend.get_texts())
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_an_rgb_val_mask_is_one_sentence_before_any_feature_is_extracted(setup, capsys):
    tmp, data, args = setup
    masks = data / "VOCdevkit" / "VOC2012" / "SegmentationClass"
    val = VOCSegDataset(data, "val", name="default")
    Image.new("RGB", (48, 40), (128, 0, 0)).save(masks / f"{val.ids[-1]}.png")
    with pytest.raises(SystemExit) as err:
        main(args + [f"ckpt={tmp / 'runs' / 'tiny'}", "num_workers=1"])
    assert str(err.value) == (f"error: mask '{masks / val.ids[-1]}.png' has mode 'RGB'; expected a palette (P) or "
                              "index (L) PNG whose pixel values are class indices; see data/README.md")
    assert "features" not in capsys.readouterr().out and not (tmp / "runs" / "tiny" / "eval").exists()


def test_one_backbone_is_probed_beside_its_random_floor_whose_features_are_kept(setup, capsys):
    tmp, _, args = setup
    runs = tmp / "runs"
    main(args + [f"ckpt={runs / 'tiny'}", "figure_images=0"])
    out = capsys.readouterr().out
    assert "backbones: tiny, random" in out and "table written" in out
    floor = runs / "random-vit_tiny-skipless-timm" / "eval"
    assert json.loads((floor / "probe-default.json").read_text())["checkpoint"] == "random (seed 0)"
    assert len(list((floor / "cache").glob("probe-default-*/meta.json"))) == 2
    main(args + [f"ckpt={runs / 'tiny'}", "figure_images=0"])  # the floor's features again: read, not extracted
    assert json.loads((floor / "probe-default.json").read_text())["timings"]["cache_reused"]


def test_the_lr_sweep_is_one_chart_per_quantity_with_a_run_per_lr(setup):
    """TensorBoard overlays a tag of several runs: each lr is a sub-run, its tags without the lr."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    tmp, _, args = setup
    main(args + [f"ckpt={tmp / 'runs' / 'tiny'}", "figure_images=0", "random_floor=false"])
    folder = tmp / "runs" / "tiny" / "eval" / "tb" / "probe-default"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["lr=0.001", "lr=0.01"]
    for lr in ("0.001", "0.01"):
        sweep = EventAccumulator(str(folder / f"lr={lr}")).Reload()
        assert set(sweep.Tags()["scalars"]) == {"probe/head_loss", "probe/val_miou_at_label_size", "probe/val_miou"}
        assert [e.step for e in sweep.Scalars("probe/head_loss")] == [1, 2]
    best = EventAccumulator(str(folder)).Reload()
    result = json.loads((tmp / "runs" / "tiny" / "eval" / "probe-default.json").read_text())
    assert [e.value for e in best.Scalars("probe/val_miou")] == [pytest.approx(result["miou"])]
