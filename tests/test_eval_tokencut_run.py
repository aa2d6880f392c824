"""End to end on the CPU: `python -m skipless.eval.tokencut` and `python -m skipless.eval.pca` on a tiny generated set."""
import csv
import json

import numpy as np
import pytest
import torch
from PIL import Image

from skipless.eval.pca import run as pca
from skipless.eval.tokencut import run as tokencut
from skipless.eval.tokencut.corloc import best_iou

from eval_fixtures import tiny_run


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    return (root, *tiny_run(root, n_train=2, n_val=5, seed=3, img_size=64))


def _argv(root, data, run, *extra):
    return ["dataset=default", f"roots.default={data}", f"ckpt={run} random", f"runs_root={root / 'runs'}",
            "num_workers=0", "figure_images=2", "device=cpu", *extra]


def test_tokencut_writes_scores_boxes_figure_events_and_table(setup, capsys):
    root, data, run = setup
    tokencut.main(_argv(root, data, run))
    out = capsys.readouterr().out
    summary = json.loads((run / "eval" / "tokencut-default.json").read_text())
    assert summary["images"] == 5 and summary["split"] == "val" and sorted(summary["corloc"]) == ["0", "1"]
    defined = {b: v for b, v in summary["corloc"].items() if int(b) not in summary["undefined_blocks"]}
    assert summary["best_corloc"] == max(defined.values())
    assert summary["corloc"][str(summary["best_block"])] == summary["best_corloc"]
    assert summary["seconds_per_image"]["total"] > 0 and summary["solver_used"] == "lapack"
    assert set(summary["ambiguous_percent"]) == {"0", "1"}
    # this tiny random-ish backbone's block 1 gives complete graphs on every image: no CorLoc, not the best
    assert summary["ambiguous_percent"]["1"] == 100 and summary["undefined_blocks"] == [1]
    assert summary["best_block"] == 0 and "| block 1 | undefined (100%) | undefined (100%) |" in out
    assert (run / "eval" / "tokencut-default.png").stat().st_size > 0
    # TensorBoard: the headline scalars at step 0, per block a figure and a table (the steps are not blocks)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(run / "eval" / "tb" / "tokencut-default")).Reload()
    assert set(events.Tags()["scalars"]) == {"tokencut-default/best_corloc", "tokencut-default/seconds_per_image"}
    assert [(e.step, e.value) for e in events.Scalars("tokencut-default/best_corloc")] == [
        (0, pytest.approx(summary["best_corloc"]))]
    assert {"tokencut-default/corloc_per_block", "tokencut-default/boxes"} <= set(events.Tags()["images"])
    # the CSV scores again to the same CorLoc, from its own boxes and ground truth
    rows = list(csv.DictReader((run / "eval" / "tokencut-default-boxes.csv").open()))
    assert len(rows) == 5 * 2
    for block in ("0", "1"):
        hits = []
        for r in (r for r in rows if r["block"] == block):
            gt = np.array([[float(v) for v in b.split()] for b in r["gt_boxes"].split(";") if b]).reshape(-1, 4)
            box = np.array([float(r[k]) for k in ("x0", "y0", "x1", "y1")])
            assert 0 <= box[0] < box[2] <= int(r["width"]) and 0 <= box[1] < box[3] <= int(r["height"])
            hits.append(best_iou(box, gt) >= 0.5)
        assert 100 * np.mean(hits) == pytest.approx(summary["corloc"][block])
    table = (root / "runs" / "compare" / "tokencut-default.md").read_text()
    assert "| CorLoc | tiny | random |" in table and "| block 1 |" in table and table.split("\n", 2)[2] in out
    assert json.loads(next((root / "runs").glob("random-*/eval/tokencut-default.json")).read_text())["images"] == 5


def test_tokencut_one_block_and_every_solver_gives_the_same_boxes(setup):
    root, data, run = setup
    boxes = {}
    for solver in ("scipy", "torch", "lapack"):
        tokencut.main(_argv(root, data, run, "layers=0", f"solver={solver}", "max_images=3", f"ckpt={run}"))
        summary = json.loads((run / "eval" / "tokencut-default.json").read_text())
        assert list(summary["corloc"]) == ["0"] and summary["images"] == 3 and summary["solver_used"] == solver
        assert summary["ambiguous_percent"]["0"] == 0  # a unique Ncut vector on every image
        rows = list(csv.DictReader((run / "eval" / "tokencut-default-boxes.csv").open()))
        boxes[solver] = [[r[k] for k in ("x0", "y0", "x1", "y1")] for r in rows]
    assert boxes["torch"] == boxes["scipy"] == boxes["lapack"]


@pytest.mark.parametrize("arg, message", [
    ("dataset=voc2007", "unknown TokenCut dataset"),
    ("layers=5", "block 5 is out of range"),
    ("feature=attn", "feature must be one of k, q, v, out, got 'attn'"),
    ("device=cuda:7" if not torch.cuda.is_available() else "device=tpu", "device"),
    ("solver=magma", "solver must be one of auto, torch, lapack, scipy"),
    ("roots.default=/nowhere", "make data"),
    ("dataset_name=x", "unknown config key"),
])
def test_tokencut_bad_input_is_one_sentence(setup, arg, message):
    root, data, run = setup
    with pytest.raises(SystemExit) as err:
        tokencut.main(_argv(root, data, run, arg))
    assert str(err.value).startswith("error: ") and message in str(err.value)


def test_pca_writes_block_and_checkpoint_grids(setup):
    root, data, run = setup
    folder = root / "photos"
    folder.mkdir()
    for i in range(3):
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (40, 50, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    argv = [f"ckpt={run} random", f"runs_root={root / 'runs'}", "device=cpu", "image_size=32", "num_images=2"]
    written = pca.run(pca.load_config("pca", argv + [f"images={folder}"]))
    assert written["blocks"]["tiny"] == run / "eval" / "pca-blocks.png" and written["blocks"]["tiny"].is_file()
    assert written["checkpoints"].name == "pca-checkpoints-block1.png" and written["checkpoints"].is_file()
    assert list((run / "eval" / "tb" / "pca-blocks").glob("events.out.tfevents.*"))  # make tensorboard: <run>/pca-blocks
    written = pca.run(pca.load_config("pca", argv + [f"roots.default={data}", "feature=k", "foreground_threshold=0.5",
                                                     f"ckpt={run}"]))
    assert written["blocks"]["tiny"].name == "pca-k-masked-blocks.png" and written["checkpoints"] is None
    with pytest.raises(SystemExit, match="error: .*multiple of the patch"):
        pca.main(argv + [f"images={folder}", "image_size=30"])


def test_pca_ends_each_trained_backbones_grid_with_a_random_init_column(setup, monkeypatch):
    root, data, run = setup
    drawn = {}
    real = pca.grid_figure

    def record(x, names, maps, titles, suptitle):
        drawn[suptitle.split(":")[0]] = (titles, [len(row) for row in maps], suptitle)
        return real(x, names, maps, titles, suptitle)

    monkeypatch.setattr(pca, "grid_figure", record)
    argv = [f"ckpt={run} random", f"runs_root={root / 'runs'}", "device=cpu", "image_size=32", "num_images=2",
            f"roots.default={data}"]
    pca.run(pca.load_config("pca", argv))
    titles, widths, suptitle = drawn["tiny"]
    assert titles == ["block 0", "block 1", "random init, block 1"] and widths == [3, 3]
    assert "PCA of each block's block outputs" not in suptitle and "outputs" in suptitle and "initialisation" in suptitle
    assert drawn["random"][0] == ["block 0", "block 1"]  # the random backbone itself gets no second floor
    pca.run(pca.load_config("pca", argv + ["random_floor=false", f"ckpt={run}"]))
    assert drawn["tiny"][0] == ["block 0", "block 1"]


def test_another_feature_keeps_its_own_files(setup):
    root, data, run = setup
    tokencut.main(_argv(root, data, run, "feature=out", "norm=true", "layers=0", "max_images=2", f"ckpt={run}"))
    summary = json.loads((run / "eval" / "tokencut-default-out.json").read_text())
    assert summary["settings"]["feature"] == "out" and summary["boxes"] == "tokencut-default-out-boxes.csv"
    assert (run / "eval" / "tokencut-default-out-boxes.csv").is_file()
