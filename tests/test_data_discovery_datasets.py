"""skipless/data/discovery/ (discovery_datasets.py, coco.py): the detection readers on tiny fixtures, clear errors."""
import json

import numpy as np
import pytest
from PIL import Image

from skipless.config import ConfigError
from skipless.data import DatasetNotFoundError, MalformedDatasetError, UnknownDatasetError
from skipless.data.discovery.discovery_datasets import DISCOVERY_DATASETS, build_discovery
from skipless.data.discovery.coco import COCO20kDetection, image_id_of

XML = """<annotation><filename>{id}.jpg</filename><size><width>50</width><height>40</height><depth>3</depth></size>
{objects}</annotation>"""
OBJ = """<object><name>{name}</name><truncated>{t}</truncated><difficult>{d}</difficult>
<bndbox><xmin>{b[0]}</xmin><ymin>{b[1]}</ymin><xmax>{b[2]}</xmax><ymax>{b[3]}</ymax></bndbox></object>"""


def _voc(root, year, objects_per_image):
    voc = root / "VOCdevkit" / f"VOC{year}"
    for sub in ("JPEGImages", "Annotations", "ImageSets/Main"):
        (voc / sub).mkdir(parents=True)
    ids = []
    for i, objects in enumerate(objects_per_image):
        image_id = f"{year}_{i:06d}"
        ids.append(image_id)
        Image.new("RGB", (50, 40), (i * 40, 0, 0)).save(voc / "JPEGImages" / f"{image_id}.jpg")
        body = "".join(OBJ.format(name=n, t=t, d=d, b=b) for n, t, d, b in objects)
        (voc / "Annotations" / f"{image_id}.xml").write_text(XML.format(id=image_id, objects=body))
    (voc / "ImageSets" / "Main" / "trainval.txt").write_text("\n".join(ids) + "\n")
    return ids


def test_voc_boxes_are_zero_based_and_keep_difficult_and_truncated(tmp_path):
    ids = _voc(tmp_path, "2007", [[("dog", 0, 0, (1, 1, 50, 40)), ("cat", 1, 1, (10, 5, 20, 15))],
                                  [("bird", 0, 1, (3, 4, 9, 12))]])
    ds = build_discovery("voc07", tmp_path)
    assert ds.ids == ids and len(ds) == 2
    image, boxes = ds[0]
    assert image.size == (50, 40)
    np.testing.assert_array_equal(boxes, [[0, 0, 50, 40], [9, 4, 20, 15]])
    np.testing.assert_array_equal(ds[1][1], [[2, 3, 9, 12]])  # an image whose only box is difficult


def _coco(root, names, annotations, list_lines=None):
    (root / "images" / "train2014").mkdir(parents=True)
    (root / "annotations").mkdir()
    for name in names:
        Image.new("RGB", (32, 24)).save(root / "images" / "train2014" / name)
    images = [{"id": image_id_of(n), "file_name": n, "width": 32, "height": 24} for n in names]
    (root / "annotations" / "instances_train2014.json").write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "x"}]}))
    lines = list_lines if list_lines is not None else [f"train2014/{n}" for n in names]
    (root / "coco_20k_filenames.txt").write_text("\n".join(lines) + "\n")


def test_coco20k_drops_crowds_rounds_xywh_to_xyxy_and_keeps_the_list_order(tmp_path):
    names = ["COCO_train2014_000000000009.jpg", "COCO_train2014_000000000025.jpg", "COCO_train2014_000000000030.jpg"]
    anns = [
        {"image_id": 9, "bbox": [1.4, 2.6, 10.2, 5.5], "iscrowd": 0, "category_id": 1},
        {"image_id": 9, "bbox": [0, 0, 30, 20], "iscrowd": 1, "category_id": 1},
        {"image_id": 25, "bbox": [3, 4, 5, 6], "iscrowd": 0, "category_id": 1},
        {"image_id": 25, "bbox": [10.5, 0.5, 2, 2], "iscrowd": 0, "category_id": 1},
        {"image_id": 30, "bbox": [0, 0, 5, 5], "iscrowd": 1, "category_id": 1},
    ]
    # the list names 25 before 9 and leaves 30 out; one line without the folder prefix
    _coco(tmp_path, names, anns, list_lines=["train2014/" + names[1], names[0]])
    ds = build_discovery("coco20k", tmp_path)
    assert isinstance(ds, COCO20kDetection) and ds.image_ids == [25, 9] and len(ds) == 2
    image, boxes = ds[1]
    assert image.size == (32, 24) and image.mode == "RGB"
    np.testing.assert_array_equal(boxes, [[1, 3, 12, 8]])  # round(1.4), round(2.6), round(11.6), round(8.1)
    # Python's round (half to even), as the reference: 10.5 -> 10, 0.5 -> 0, 12.5 -> 12, 2.5 -> 2
    np.testing.assert_array_equal(ds[0][1], [[3, 4, 8, 10], [10, 0, 12, 2]])


def test_coco20k_image_with_only_crowds_has_no_box(tmp_path):
    names = ["COCO_train2014_000000000030.jpg"]
    _coco(tmp_path, names, [{"image_id": 30, "bbox": [0, 0, 5, 5], "iscrowd": 1, "category_id": 1}])
    assert build_discovery("coco20k", tmp_path)[0][1].shape == (0, 4)


def test_coco_file_names_parse_and_bad_ones_are_refused():
    assert image_id_of("train2014/COCO_train2014_000000560992.jpg") == 560992
    with pytest.raises(MalformedDatasetError, match="not a COCO file name"):
        image_id_of("train2014/dog.jpg")


@pytest.mark.parametrize("name, expected", [
    ("voc07", "VOCdevkit/VOC2007"), ("voc12", "VOCdevkit/VOC2012"),
    ("coco20k", "instances_train2014.json"), ("default", "make data"),
])
def test_missing_dataset_is_one_clear_error_naming_the_layout(tmp_path, name, expected):
    with pytest.raises(DatasetNotFoundError) as err:
        build_discovery(name, tmp_path / "nowhere")
    message = str(err.value)
    assert expected in message and "data/README.md" in message and "\n" not in message


def test_coco20k_missing_images_or_annotations_are_named(tmp_path):
    names = ["COCO_train2014_000000000009.jpg"]
    _coco(tmp_path, names, [], list_lines=["train2014/COCO_train2014_000000000010.jpg"])
    with pytest.raises(DatasetNotFoundError, match="1 of 1 listed images"):
        build_discovery("coco20k", tmp_path)
    (tmp_path / "coco_20k_filenames.txt").write_text("train2014/" + names[0])
    (tmp_path / "annotations" / "instances_train2014.json").unlink()
    with pytest.raises(DatasetNotFoundError, match="annotations"):
        build_discovery("coco20k", tmp_path)


def test_unknown_dataset_or_split_lists_the_known_ones(tmp_path):
    with pytest.raises(UnknownDatasetError, match="voc07, voc12, coco20k"):
        build_discovery("voc2007", tmp_path)
    with pytest.raises(ConfigError, match="expected one of: train"):
        build_discovery("coco20k", tmp_path, split="val")
    assert DISCOVERY_DATASETS["voc12"].split == "trainval" and DISCOVERY_DATASETS["default"].split == "val"
