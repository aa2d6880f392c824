"""skipless.data segmentation readers (segmentation, ade20k, cocostuff, seg_views, segmentation_datasets): each layout's reader and label mapping, on tiny fixtures written to disk."""
import numpy as np
import pytest
from PIL import Image

from skipless.data.segmentation.ade20k import ADE20K
from skipless.data.segmentation.cocostuff import COCO_UNUSED_RAW_IDS, COCOSTUFF_CLASSES, COCOStuff
from skipless.data.errors import UnknownDatasetError
from skipless.data.segmentation.seg_views import Mirrored, random_subset
from skipless.data.segmentation.interface import VOCSegDataset
from skipless.data.segmentation.segmentation_datasets import SEGMENTATION_DATASETS, build_split
from skipless.data.errors import DatasetNotFoundError, MalformedDatasetError
from skipless.data.voc import VOC_CLASSES

from seg_fixtures import save_palette, write_ade20k, write_cocostuff, write_voc


def _raw(path):
    return np.array(Image.open(path))


def test_voc_reads_palette_indices_not_colours(tmp_path):
    root = write_voc(tmp_path, n_train=4, n_val=2)
    voc = tmp_path / "VOCdevkit" / "VOC2012"
    ds = VOCSegDataset(root, "train")
    assert ds.num_classes == 21 and ds.class_names == VOC_CLASSES and len(ds) == 4
    for i, image_id in enumerate(ds.ids):
        raw = _raw(voc / "SegmentationClass" / f"{image_id}.png")
        mask = ds.mask(i)
        assert mask.dtype == np.uint8 and np.array_equal(mask, raw)
        assert 255 in mask and mask.shape == (ds.image(i).height, ds.image(i).width)
    # an index no class has (VOC has none) is ignored, not scored as a class
    odd = np.zeros((40, 48), np.uint8)
    odd[:5] = 21
    odd[5:10] = 20
    save_palette(voc / "SegmentationClass" / f"{ds.ids[0]}.png", odd)
    mask = ds.mask(0)
    assert (mask[:5] == 255).all() and (mask[5:10] == 20).all() and (mask[10:] == 0).all()


def test_default_takes_its_class_names_from_the_marker(tmp_path):
    classes = ["background", "disc", "square", "star"]
    root = write_voc(tmp_path, classes=classes)
    ds = build_split("default", root, "val")
    assert ds.name == "default" and ds.class_names == tuple(classes) and len(ds) == 4
    assert set(np.unique(ds.mask(0)).tolist()) <= {0, 1, 2, 3, 255}


def test_voc_refuses_rgb_masks(tmp_path):
    root = write_voc(tmp_path, n_train=2, n_val=1)
    ds = VOCSegDataset(root, "train")
    Image.new("RGB", (48, 40), (128, 0, 0)).save(tmp_path / "VOCdevkit/VOC2012/SegmentationClass" / f"{ds.ids[0]}.png")
    with pytest.raises(MalformedDatasetError, match="palette"):
        ds.mask(0)


def test_ade20k_ignores_label_zero_and_shifts_the_rest(tmp_path):
    pairs = [(1, 0), (150, 12), (151, 2)]  # 151 is no ADE20K class: ignored
    write_ade20k(tmp_path, "validation", pairs)
    ds = ADE20K(tmp_path, "validation")
    assert ds.num_classes == 150 and ds.class_names[0] == "wall" and ds.class_names[-1] == "flag"
    assert ds.ids == ["ADE_val_00000001", "ADE_val_00000002", "ADE_val_00000003"]
    base = tmp_path / "ADEChallengeData2016" / "annotations" / "validation"
    for i, (inside, outside) in enumerate(pairs):
        raw, mask = _raw(base / f"{ds.ids[i]}.png"), ds.mask(i)
        expect_in = 255 if inside in (0, 151) else inside - 1
        expect_out = 255 if outside in (0, 151) else outside - 1
        assert (mask[raw == inside] == expect_in).all() and (mask[raw == outside] == expect_out).all()
    assert np.array_equal(np.unique(ds.mask(0)), [0, 255])  # 1 -> 0 (wall), 0 -> 255
    assert set(np.unique(ds.mask(1)).tolist()) == {149, 11}


def test_cocostuff_maps_raw_ids_to_171_train_ids_and_passes_converted_files(tmp_path):
    assert len(COCOSTUFF_CLASSES) == 171 and len(COCO_UNUSED_RAW_IDS) == 11
    pairs = [(0, 255), (11, 12), (91, 90), (181, 182), (170, 5)]
    converted = [False, False, False, False, True]
    write_cocostuff(tmp_path, "val2017", pairs, converted)
    ds = COCOStuff(tmp_path, "val2017")
    assert ds.num_classes == 171 and len(ds) == 5
    used = [r for r in range(182) if r not in COCO_UNUSED_RAW_IDS]  # train id = rank among used raw ids

    def expected(raw, is_train_id):
        if is_train_id:
            return raw if raw < 171 else 255
        return used.index(raw) if raw in used else 255

    for i, ((inside, outside), conv) in enumerate(zip(pairs, converted)):
        suffix = "_labelTrainIds" if conv else ""
        raw = _raw(tmp_path / "annotations" / "val2017" / f"{ds.ids[i]}{suffix}.png")
        mask = ds.mask(i)
        for value in (inside, outside, 255):
            if (raw == value).any():
                assert (mask[raw == value] == expected(value, conv)).all(), (i, value)
    # spot checks of the table: person, the first thing after an unused id, the first stuff, the last stuff
    assert ds.mask(0)[_raw(tmp_path / "annotations/val2017" / f"{ds.ids[0]}.png") == 0][0] == 0
    assert ds.class_names[used.index(12)] == "stop sign" and used.index(91) == 80
    assert ds.class_names[80] == "banner" and ds.class_names[used.index(181)] == "wood"
    assert 90 in COCO_UNUSED_RAW_IDS and (ds.mask(2)[_raw(tmp_path / "annotations/val2017" / f"{ds.ids[2]}.png") == 90] == 255).all()


def test_cocostuff_prefers_train_id_files_when_both_exist(tmp_path):
    write_cocostuff(tmp_path, "train2017", [(12, 0)], [False])
    image_id = f"{139:012d}"
    raw = _raw(tmp_path / "annotations/train2017" / f"{image_id}.png")
    converted = np.where(raw == 12, 7, raw).astype(np.uint8)  # deliberately not the raw mapping (12 -> 11)
    Image.fromarray(converted, mode="L").save(tmp_path / "annotations/train2017" / f"{image_id}_labelTrainIds.png")
    ds = COCOStuff(tmp_path, "train2017")
    assert ds.ids == [image_id] and (ds.mask(0)[raw == 12] == 7).all()


def test_random_subset_is_seeded_sorted_and_optional(tmp_path):
    root = write_voc(tmp_path, n_train=10, n_val=1)
    ds = VOCSegDataset(root, "train")
    a, b, c = random_subset(ds, 4, seed=0), random_subset(ds, 4, seed=0), random_subset(ds, 4, seed=1)
    assert len(a) == 4 and a.ids == b.ids and a.ids != c.ids
    assert a.ids == sorted(a.ids) and set(a.ids) <= set(ds.ids)
    assert np.array_equal(a.mask(1), ds.mask(ds.ids.index(a.ids[1])))
    assert random_subset(ds, None, 0) is ds and random_subset(ds, 50, 0) is ds
    assert build_split("voc", root, "train", subset=4, seed=0).ids == a.ids


@pytest.mark.parametrize("name, layout", [
    ("voc", "VOCdevkit/VOC2012"), ("ade20k", "ADEChallengeData2016"), ("cocostuff", "annotations/<split>"),
])
def test_missing_dataset_names_the_layout_and_the_readme(tmp_path, name, layout):
    split = {"voc": "train", "ade20k": "training", "cocostuff": "train2017"}[name]
    with pytest.raises(DatasetNotFoundError) as err:
        build_split(name, tmp_path / "nowhere", split)
    message = str(err.value)
    assert layout in message and "data/README.md" in message and "nowhere" in message
    assert "\n" not in message


def test_missing_label_files_are_one_clear_error(tmp_path):
    write_ade20k(tmp_path, "training", [(1, 0), (2, 0)])
    (tmp_path / "ADEChallengeData2016/annotations/training/ADE_train_00000002.png").unlink()
    with pytest.raises(DatasetNotFoundError, match="1 of 2 images, e.g. ADE_train_00000002"):
        ADE20K(tmp_path, "training")


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(UnknownDatasetError) as err:
        build_split("pascal", ".", "train")
    assert all(name in str(err.value) for name in SEGMENTATION_DATASETS)


def test_mirrored_flips_image_and_labels_together(tmp_path):
    root = write_voc(tmp_path, n_train=2, n_val=1)
    ds = VOCSegDataset(root, "train")
    flipped = Mirrored(random_subset(ds, 1, seed=0))
    assert flipped.ids == random_subset(ds, 1, seed=0).ids and len(flipped) == 1
    i = ds.ids.index(flipped.ids[0])
    assert np.array_equal(flipped.mask(0), ds.mask(i)[:, ::-1])
    assert np.array_equal(np.asarray(flipped.image(0)), np.asarray(ds.image(i))[:, ::-1])


def test_an_rgb_label_map_is_found_from_png_headers_when_the_split_is_built(tmp_path):
    from skipless.data.segmentation.label_modes import png_mode

    write_ade20k(tmp_path, "training", [(1, 0), (2, 0)])
    write_ade20k(tmp_path, "validation", [(1, 0), (2, 0), (3, 0)])
    labels = tmp_path / "ADEChallengeData2016" / "annotations" / "validation"
    for name in ("ADE_val_00000002.png", "ADE_val_00000003.png"):  # coloured visualisations saved as labels
        Image.new("RGB", (44, 36), (120, 0, 0)).save(labels / name)
    truncated = labels / "ADE_val_00000003.png"
    truncated.write_bytes(truncated.read_bytes()[:40])  # the header alone says RGB: nothing is decoded
    assert png_mode(truncated) == "RGB" and png_mode(labels / "ADE_val_00000001.png") == "L"
    assert build_split("ade20k", tmp_path, "training").ids  # the training split is sound
    with pytest.raises(MalformedDatasetError) as err:
        build_split("ade20k", tmp_path, "validation")
    assert str(err.value) == (f"mask '{labels / 'ADE_val_00000002.png'}' has mode 'RGB' (as have 1 more of the 3 "
                              "label files); expected a palette (P) or index (L) PNG whose pixel values are class "
                              "indices; see data/README.md")
    (labels / "ADE_val_00000002.png").write_bytes(b"GIF89a not a png at all....")
    with pytest.raises(MalformedDatasetError, match="ADE_val_00000002.png' is not a PNG file"):
        build_split("ade20k", tmp_path, "validation", subset=2, seed=0)


@pytest.mark.parametrize("name, inside, split", [
    ("ade20k", "ADEChallengeData2016", "training"), ("voc", "VOCdevkit", "train"), ("voc", "VOCdevkit/VOC2012", "train"),
])
def test_a_data_root_that_is_the_datasets_own_folder_says_which_folder_to_give(tmp_path, name, inside, split):
    (tmp_path / inside).mkdir(parents=True)
    with pytest.raises(DatasetNotFoundError) as err:
        build_split(name, tmp_path / inside, split)
    message = str(err.value)
    assert f"the dataset's own folder {inside.split('/')[0]}; give the folder that holds it instead, " \
           f"DATA_ROOT={tmp_path} (expected" in message and "\n" not in message


def test_missing_cocostuff_annotations_name_the_zip_and_where_its_folders_go(tmp_path):
    write_cocostuff(tmp_path, "val2017", [(1, 0)], [False])
    (tmp_path / "annotations" / "val2017").rename(tmp_path / "val2017")  # unzipped in the data root
    with pytest.raises(DatasetNotFoundError) as err:
        build_split("cocostuff", tmp_path, "val2017")
    assert (f"{tmp_path / 'val2017'} is there: stuffthingmaps_trainval2017.zip unzips to train2017/ and val2017/, "
            f"which go under {tmp_path / 'annotations'}/ (move both there)") in str(err.value)
    (tmp_path / "val2017").rename(tmp_path / "elsewhere")
    with pytest.raises(DatasetNotFoundError) as err:
        build_split("cocostuff", tmp_path, "val2017")
    assert "stuffthingmaps_trainval2017.zip unzips to train2017/ and val2017/; put both under " \
           f"{tmp_path / 'annotations'}/" in str(err.value)
