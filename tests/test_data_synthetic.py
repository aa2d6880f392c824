"""The embedded default dataset: layout, determinism, ground truth and safe (re)generation."""
import fcntl
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from skipless.data.generator import scene_render, synthetic
from skipless.data.generator.synthetic import CLASSES, ensure_default, generate, is_complete

N_TRAIN, N_VAL = 12, 6
ROOT = Path(__file__).resolve().parents[1]


def _voc(root: Path) -> Path:
    return root / "VOCdevkit" / "VOC2012"


def _ids(root: Path, kind: str, split: str) -> list[str]:
    return (_voc(root) / "ImageSets" / kind / f"{split}.txt").read_text().split()


def _png(path: Path) -> np.ndarray:
    return np.array(Image.open(path))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("default"), n_train=N_TRAIN, n_val=N_VAL, seed=0, workers=1)


def test_layout_lists_and_marker(dataset):
    voc = _voc(dataset)
    ids = [f"{i:06d}" for i in range(N_TRAIN + N_VAL)]
    for kind in ("Segmentation", "Main"):
        assert _ids(dataset, kind, "train") == ids[:N_TRAIN]
        assert _ids(dataset, kind, "val") == ids[N_TRAIN:]
        assert _ids(dataset, kind, "trainval") == ids
    for folder, suffix in (("JPEGImages", ".jpg"), ("SegmentationClass", ".png"),
                           ("SegmentationObject", ".png"), ("Annotations", ".xml")):
        assert sorted(os.listdir(voc / folder)) == [i + suffix for i in ids], folder
    marker = json.loads((voc / "skipless_default.json").read_text())
    assert (marker["n_train"], marker["n_val"], marker["seed"]) == (N_TRAIN, N_VAL, 0)
    assert marker["classes"] == list(CLASSES) and marker["version"] == synthetic.GENERATOR_VERSION
    counted = sum(len(ET.parse(voc / "Annotations" / f"{i}.xml").findall("object")) for i in ids[:N_TRAIN])
    assert sum(marker["objects"]["train"].values()) == counted
    assert not list(voc.parent.glob(".VOC2012.*")), "temporary folders left behind"
    assert is_complete(dataset, N_TRAIN, N_VAL, 0)


def test_images_vary_in_size_and_are_jpegs(dataset):
    sizes = set()
    for path in sorted((_voc(dataset) / "JPEGImages").iterdir()):
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            assert all(side in synthetic.SIDES for side in image.size)
            sizes.add(image.size)
    assert len(sizes) > 1


def test_same_seed_same_bytes_whatever_the_worker_count(dataset, tmp_path):
    again = generate(tmp_path / "again", n_train=N_TRAIN, n_val=N_VAL, seed=0, workers=2)
    for i in range(N_TRAIN + N_VAL):
        for folder in ("SegmentationClass", "SegmentationObject"):
            a, b = (_voc(r) / folder / f"{i:06d}.png" for r in (dataset, again))
            assert a.read_bytes() == b.read_bytes()
        a, b = (_voc(r) / "Annotations" / f"{i:06d}.xml" for r in (dataset, again))
        assert a.read_bytes() == b.read_bytes()
        a, b = (_voc(r) / "JPEGImages" / f"{i:06d}.jpg" for r in (dataset, again))
        assert np.array_equal(np.array(Image.open(a)), np.array(Image.open(b)))


def test_different_seed_different_scenes(dataset, tmp_path):
    other = generate(tmp_path / "other", n_train=3, n_val=1, seed=1, workers=1)
    for i in range(4):
        a, b = (np.array(Image.open(_voc(r) / "JPEGImages" / f"{i:06d}.jpg")) for r in (dataset, other))
        assert a.shape != b.shape or not np.array_equal(a, b)


def test_masks_are_voc_palette_pngs_with_class_indices(dataset):
    seen = set()
    for path in sorted((_voc(dataset) / "SegmentationClass").iterdir()):
        with Image.open(path) as png:
            assert png.mode == "P"
            palette = png.getpalette()
            assert palette[3:6] == [128, 0, 0] and palette[6:9] == [0, 128, 0]  # VOC's colours
            assert palette[255 * 3:256 * 3] == [224, 224, 192]
            mask = np.array(png)
        values = set(np.unique(mask).tolist())
        assert values <= set(range(len(CLASSES))) | {255}
        assert values & set(range(1, len(CLASSES))), f"{path.name} has no object"
        assert 255 in values
        seen |= values
    assert len(seen - {0, 255}) >= 5  # several classes among 18 images


def test_void_band_lies_on_boundaries_only(dataset):
    reach = 3 * synthetic.BAND  # a void pixel is within BAND of a higher layer; at most 3 layers
    for path in sorted((_voc(dataset) / "SegmentationObject").iterdir()):
        inst = _png(path)
        band = inst == 255
        assert band.any(), path.name
        # Thin and next to objects: every void pixel is close to an object pixel.
        objects = (inst != 0) & (inst != 255)
        distance = ndimage.distance_transform_cdt(~objects, metric="chessboard")
        assert distance[band].max() <= reach, path.name
        # Along every boundary: no two differently labelled pixels are 4-neighbours.
        for a, b in ((inst[1:], inst[:-1]), (inst[:, 1:], inst[:, :-1])):
            touching = (a != b) & (a != 255) & (b != 255)
            assert not touching.any(), path.name


def test_xml_boxes_are_the_extent_of_each_visible_object(dataset):
    voc = _voc(dataset)
    for image_id in _ids(dataset, "Main", "trainval"):
        inst = _png(voc / "SegmentationObject" / f"{image_id}.png")
        cls = _png(voc / "SegmentationClass" / f"{image_id}.png")
        root = ET.parse(voc / "Annotations" / f"{image_id}.xml").getroot()
        assert root.findtext("filename") == f"{image_id}.jpg"
        assert (int(root.findtext("size/width")), int(root.findtext("size/height"))) == inst.shape[::-1]
        objects = root.findall("object")
        assert set(np.unique(inst).tolist()) - {0, 255} == set(range(1, len(objects) + 1))
        for k, obj in enumerate(objects, start=1):
            rows, cols = np.nonzero(inst == k)
            expected = [cols.min() + 1, rows.min() + 1, cols.max() + 1, rows.max() + 1]  # 1-based inclusive
            box = [int(obj.findtext(f"bndbox/{key}")) for key in ("xmin", "ymin", "xmax", "ymax")]
            assert box == expected, (image_id, k)
            assert set(np.unique(cls[inst == k]).tolist()) == {CLASSES.index(obj.findtext("name"))}
            assert obj.findtext("difficult") == "0"
        assert np.array_equal(cls == 255, inst == 255) and np.array_equal(cls == 0, inst == 0)


def test_ensure_default_keeps_a_complete_dataset_and_regenerates_another_size(tmp_path, capsys):
    root = generate(tmp_path, n_train=3, n_val=2, seed=0, workers=1)
    marker = _voc(root) / "skipless_default.json"
    before = marker.stat().st_mtime_ns
    assert ensure_default(root, n_train=3, n_val=2, seed=0, workers=1) == root
    assert marker.stat().st_mtime_ns == before
    capsys.readouterr()
    ensure_default(root, n_train=4, n_val=2, seed=0, workers=1)
    assert "regenerating" in capsys.readouterr().out
    assert json.loads(marker.read_text())["n_train"] == 4
    assert len(_ids(root, "Segmentation", "train")) == 4
    assert not is_complete(root, 3, 2, 0) and is_complete(root, 4, 2, 0)


def test_interrupted_generation_never_looks_complete(tmp_path, monkeypatch):
    real_write = synthetic.write_scene

    def crash_after_three(index, seed, voc):
        if index == 3:
            raise KeyboardInterrupt
        return real_write(index, seed, voc)

    monkeypatch.setattr(synthetic, "write_scene", crash_after_three)
    with pytest.raises(KeyboardInterrupt):
        generate(tmp_path, n_train=4, n_val=2, seed=0, workers=1)
    assert not _voc(tmp_path).exists()
    assert list((tmp_path / "VOCdevkit").glob(".VOC2012.tmp-*")), "the partial output should stay aside"
    assert not is_complete(tmp_path, 4, 2, 0)
    monkeypatch.setattr(synthetic, "write_scene", real_write)
    ensure_default(tmp_path, n_train=4, n_val=2, seed=0, workers=1)
    assert is_complete(tmp_path, 4, 2, 0)
    assert not list((tmp_path / "VOCdevkit").glob(".VOC2012.*")), "stale temporary folder not cleaned"


def test_generated_folder_without_marker_is_regenerated(tmp_path):
    root = generate(tmp_path, n_train=2, n_val=1, seed=0, workers=1)
    (_voc(root) / "skipless_default.json").unlink()
    assert not is_complete(root, 2, 1, 0)
    ensure_default(root, n_train=2, n_val=1, seed=0, workers=1)
    assert is_complete(root, 2, 1, 0)


def test_a_real_voc_folder_is_never_overwritten(tmp_path):
    images = _voc(tmp_path) / "JPEGImages"
    images.mkdir(parents=True)
    (images / "2007_000027.jpg").write_bytes(b"user data")
    with pytest.raises(FileExistsError, match="data/README.md"):
        ensure_default(tmp_path, n_train=2, n_val=1, seed=0, workers=1)
    assert (images / "2007_000027.jpg").read_bytes() == b"user data"


def test_concurrent_ranks_generate_once(tmp_path):
    code = ("import sys; from skipless.data.generator.synthetic import ensure_default; "
            "ensure_default(sys.argv[1], n_train=6, n_val=2, seed=0, workers=1)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with open(tmp_path / ".generate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # both ranks find no dataset and queue on the lock
        ranks = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=env) for _ in range(2)]
        time.sleep(2.0)
        fcntl.flock(lock, fcntl.LOCK_UN)
    outputs = [rank.communicate(timeout=60)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0]
    assert sum(out.count("generating") for out in outputs) == 1, outputs  # also "regenerating"
    assert is_complete(tmp_path, 6, 2, 0)


def test_cli_reports_where_and_how_long(tmp_path, capsys):
    synthetic.main(["--root", str(tmp_path), "--n-train", "2", "--n-val", "1", "--workers", "1"])
    out = capsys.readouterr().out
    assert str(_voc(tmp_path)) in out and " s" in out
    synthetic.main(["--root", str(tmp_path), "--n-train", "2", "--n-val", "1"])
    assert "nothing to do" in capsys.readouterr().out


def test_only_bundled_skimage_images_are_used():
    folder = scene_render.skimage_data_dir()
    for name in set(scene_render.BACKGROUNDS) | set(scene_render.TEXTURES):
        assert (folder / name).is_file(), name


def test_class_cue_first_object_dominates_and_wears_its_class_hue():
    """The k-NN label (dominant class) is usually the first, larger object, and most objects carry
    their class's hue band, (k - 1) / 10 of the colour circle (generator v6)."""
    first_dominant, hue_hits, n = 0, 0, 40
    for index in range(n):
        image, instance, objects = synthetic.render(index, seed=3)
        counts = np.bincount(instance[instance != 255].ravel(), minlength=len(objects) + 1)[1:]
        first_dominant += int(counts.argmax() == 0)
        pixels = image[instance == 1].astype(np.float64) / 255.0
        # hue of the object's mean colour (hexcone formula), compared on the circle
        r, g, b = pixels.mean(0)
        hue = np.arctan2(np.sqrt(3) * (g - b), 2 * r - g - b) / (2 * np.pi) % 1.0
        target = (CLASSES.index(objects[0]["name"]) - 1) / (len(CLASSES) - 1)
        hue_hits += int(min(abs(hue - target), 1 - abs(hue - target)) < 0.08)
    assert first_dominant >= 0.8 * n
    assert hue_hits >= 0.6 * n  # 85% typical, less the flat-colour or shaded ones near a band edge


def test_make_data_and_ensure_default_take_root_and_sizes_from_the_data_yaml(monkeypatch, capsys):
    """configs/data/default.yaml is the one place the default's root, sizes and seed are written."""
    from omegaconf import OmegaConf

    from skipless.config import CONFIG_DIR
    from skipless.data.generator import synthetic

    d = OmegaConf.load(CONFIG_DIR / "data" / "default.yaml").data
    yaml_values = (str(d.root), d.n_train, d.n_val, d.seed)
    seen = []
    monkeypatch.setattr(synthetic, "is_complete", lambda root, n_train, n_val, seed: seen.append(
        (str(root), n_train, n_val, seed)) or True)
    synthetic.main([])  # what `make data` runs
    assert seen == [yaml_values] and "nothing to do" in capsys.readouterr().out
    assert synthetic.ensure_default(d.root) == Path(d.root) and seen[-1] == yaml_values
