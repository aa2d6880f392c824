"""Readers of the VOC layout and of image folders, checked against what is on disk."""
import shutil
import warnings
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from skipless.data.errors import CorruptImageWarning, DatasetNotFoundError, MalformedDatasetError
from skipless.data.image_folder import ImageFolderDataset, VOCImages
from skipless.data.generator.synthetic import CLASSES, generate
from skipless.data.voc import VOC_CLASSES, VOCClassification, VOCDetection, VOCSegmentation, voc_palette


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("voc"), n_train=12, n_val=6, seed=3, workers=1)


def _voc(root: Path, year: str = "2012") -> Path:
    return root / "VOCdevkit" / f"VOC{year}"


def _copy(root: Path, tmp_path: Path) -> Path:
    shutil.copytree(root / "VOCdevkit", tmp_path / "VOCdevkit")
    return tmp_path


def test_palette_is_vocs():
    palette = voc_palette()
    assert len(palette) == 768
    assert palette[:3 * 4] == [0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0]
    assert palette[15 * 3:16 * 3] == [192, 128, 128]  # person
    assert palette[255 * 3:] == [224, 224, 192]  # void


def test_segmentation_reads_indices_back(root):
    for split, n in (("train", 12), ("val", 6)):
        ds = VOCSegmentation(root, split)
        assert len(ds) == n and ds.ids == (_voc(root) / "ImageSets/Segmentation" / f"{split}.txt").read_text().split()
        assert ds.num_classes == len(CLASSES) == 11 and ds.class_names == CLASSES
        for i, image_id in enumerate(ds.ids):
            image, mask = ds[i]
            assert image.mode == "RGB" and mask.dtype == np.uint8 and mask.shape == (image.height, image.width)
            png = Image.open(_voc(root) / "SegmentationClass" / f"{image_id}.png")
            assert np.array_equal(mask, np.array(png))  # indices, not colours
            jpeg = np.array(Image.open(_voc(root) / "JPEGImages" / f"{image_id}.jpg").convert("RGB"))
            assert np.array_equal(np.array(image), jpeg)
            assert set(np.unique(mask).tolist()) <= set(range(11)) | {255}


def test_real_voc_has_21_classes(root, tmp_path):
    data = _copy(root, tmp_path)
    (_voc(data) / "skipless_default.json").unlink()
    ds = VOCSegmentation(data, "train")
    assert ds.num_classes == 21 and ds.class_names == VOC_CLASSES


def test_rgb_mask_is_refused(root, tmp_path):
    data = _copy(root, tmp_path)
    ds = VOCSegmentation(data, "train")
    path = _voc(data) / "SegmentationClass" / f"{ds.ids[0]}.png"
    Image.open(path).convert("RGB").save(path)
    with pytest.raises(MalformedDatasetError, match="palette"):
        ds[0]


def test_detection_boxes_are_zero_based_extents_of_the_objects(root):
    ds = VOCDetection(root, "trainval")
    assert len(ds) == 18
    for i, image_id in enumerate(ds.ids):
        image, boxes = ds[i]
        inst = np.array(Image.open(_voc(root) / "SegmentationObject" / f"{image_id}.png"))
        cls = np.array(Image.open(_voc(root) / "SegmentationClass" / f"{image_id}.png"))
        assert boxes.dtype == np.float32 and boxes.shape == (inst.max(where=inst != 255, initial=0), 4)
        names = ds.annotation(i).names
        for k, (box, name) in enumerate(zip(boxes, names), start=1):
            rows, cols = np.nonzero(inst == k)
            # 0-based continuous corners: x1 - x0 is the width in pixels.
            assert box.tolist() == [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]
            assert CLASSES[np.bincount(cls[inst == k]).argmax()] == name
        assert (boxes[:, 2] <= image.width).all() and (boxes[:, 3] <= image.height).all()


def test_detection_can_drop_difficult_boxes(root, tmp_path):
    data = _copy(root, tmp_path)
    ds = VOCDetection(data, "trainval")
    index = next(i for i in range(len(ds)) if len(ds[i][1]) >= 2)
    path = _voc(data) / "Annotations" / f"{ds.ids[index]}.xml"
    tree = ET.parse(path)
    tree.getroot().find("object/difficult").text = "1"
    tree.write(path)
    kept_all = VOCDetection(data, "trainval")[index][1]
    dropped = VOCDetection(data, "trainval", drop_difficult=True)
    assert len(dropped[index][1]) == len(kept_all) - 1
    assert np.array_equal(dropped[index][1], kept_all[1:])
    assert len(dropped.annotation(index).names) == len(kept_all) - 1


def test_detection_reads_a_voc2007_layout(root, tmp_path):
    src, dst = _voc(root), _voc(tmp_path, "2007")
    for folder in ("JPEGImages", "Annotations", "ImageSets/Main"):
        shutil.copytree(src / folder, dst / folder)
    ds = VOCDetection(tmp_path, "trainval", year="2007")
    assert len(ds) == 18 and len(ds[0][1]) >= 1


def test_classification_label_is_the_dominant_object_class(root):
    ds = VOCClassification(root, "train")
    assert ds.num_classes == len(CLASSES) - 1 and ds.class_names == CLASSES[1:]
    labels = ds.labels
    for i, image_id in enumerate(ds.ids):
        mask = np.array(Image.open(_voc(root) / "SegmentationClass" / f"{image_id}.png"))
        counts = Counter(v for v in mask.ravel().tolist() if v not in (0, 255))
        best = max(counts.values())
        image, label = ds[i]
        assert label == labels[i] and 0 <= label < ds.num_classes
        assert counts[label + 1] == best
        assert image.size == (mask.shape[1], mask.shape[0])


def test_images_for_pretraining_fall_back_to_main_lists(root, tmp_path):
    assert len(VOCImages(root, "train")) == 12
    assert VOCImages(root, "val", transform=lambda im: im.size)[0] == Image.open(
        _voc(root) / "JPEGImages" / f"{VOCImages(root, 'val').ids[0]}.jpg").size
    data = _copy(root, tmp_path)
    (_voc(data) / "ImageSets/Main/extra.txt").write_text("000001\n000004\n")
    ds = VOCImages(data, "extra")
    assert ds.ids == ["000001", "000004"] and ds[1].mode == "RGB"


@pytest.mark.parametrize("make", [
    lambda r: VOCSegmentation(r, "train"), lambda r: VOCDetection(r, "trainval"),
    lambda r: VOCImages(r, "train"), lambda r: VOCClassification(r, "train"),
    lambda r: ImageFolderDataset(r / "imagenet" / "train"),
])
def test_missing_dataset_names_layout_and_readme(tmp_path, make):
    with pytest.raises(DatasetNotFoundError, match="data/README.md") as error:
        make(tmp_path)
    assert str(tmp_path) in str(error.value) and "expected" in str(error.value)


def test_missing_list_or_files_are_clear_errors(root, tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"ImageSets/Segmentation/<split>\.txt"):
        VOCSegmentation(root, "no_such_split")
    data = _copy(root, tmp_path)
    (_voc(data) / "JPEGImages" / "000002.jpg").unlink()
    with pytest.raises(DatasetNotFoundError, match="000002.jpg"):
        VOCSegmentation(data, "train")
    with pytest.raises(FileNotFoundError):  # DatasetNotFoundError is a FileNotFoundError
        VOCDetection(data, "trainval")


def _write_image(path: Path, value: int, fmt: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (20, 16), (value, value, value)).save(path, format=fmt)


def test_image_folder_lists_recursively_sorted_and_skips_corrupt_files(tmp_path):
    _write_image(tmp_path / "n01" / "a.jpg", 10)
    _write_image(tmp_path / "n01" / "b.JPEG", 20, "JPEG")
    _write_image(tmp_path / "n02" / "c.png", 30)
    _write_image(tmp_path / "flat.webp", 40)
    (tmp_path / "n02" / "notes.txt").write_text("not an image")
    (tmp_path / "n01" / "broken.jpg").write_bytes(b"\xff\xd8 certainly not a jpeg " * 10)
    ds = ImageFolderDataset(tmp_path)
    names = [p.relative_to(tmp_path).as_posix() for p in ds.files]
    assert names == ["flat.webp", "n01/a.jpg", "n01/b.JPEG", "n01/broken.jpg", "n02/c.png"]
    with pytest.warns(CorruptImageWarning, match="broken.jpg"):
        image = ds[3]
    assert ds.skipped == 1
    assert np.array(image)[0, 0].tolist() == [30, 30, 30]  # the next file, c.png, was served
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once per file
        ds[3]
    assert ds.skipped == 2 and ds[1].size == (20, 16)
    assert ImageFolderDataset(tmp_path, transform=lambda im: im.size)[0] == (20, 16)


def test_image_folder_skips_a_truncated_jpeg(tmp_path):
    _write_image(tmp_path / "a.jpg", 10)
    full = tmp_path / "b.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(full)
    full.write_bytes(full.read_bytes()[:400])
    ds = ImageFolderDataset(tmp_path)
    with pytest.warns(CorruptImageWarning):
        assert np.array(ds[1])[0, 0].tolist() == [10, 10, 10]  # wrapped around to a.jpg
    assert ds.skipped == 1


def test_empty_image_folder_is_a_clear_error(tmp_path):
    (tmp_path / "n01").mkdir()
    (tmp_path / "n01" / "readme.txt").write_text("no images")
    with pytest.raises(DatasetNotFoundError, match="data/README.md"):
        ImageFolderDataset(tmp_path)
