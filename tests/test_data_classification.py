"""Classification readers (``classification_split``) on tiny copies of each dataset's official layout.

Each image is a flat colour that encodes its class (JPEG keeps a flat colour to within a few levels),
so a test can tell from the pixels alone whether a label went with the right file.
"""
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from PIL import Image

from skipless.data.classification.registry import READERS, classification_split
from skipless.data.errors import CorruptImageWarning, DatasetNotFoundError, MalformedDatasetError, UnknownDatasetError
from skipless.data.generator.synthetic import CLASSES
from seg_fixtures import write_voc

WNIDS = ["n01440764", "n01443537", "n02119789"]  # sorted: the classes of ImageNet's train/
WORDS = {"n01440764": "tench, Tinca tinca", "n01443537": "goldfish, Carassius auratus",
         "n02119789": "kit fox, Vulpes macrotis"}
COLOURS = [(220, 30, 30), (30, 200, 40), (40, 50, 210), (200, 200, 40)]


def _jpeg(path: Path, colour, size=(20, 16)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path, quality=95)
    return path


def _colour_class(image: Image.Image) -> int:
    """The class whose colour the (flat) image has."""
    mean = np.asarray(image, dtype=float).reshape(-1, 3).mean(0)
    return int(np.argmin([np.abs(mean - c).sum() for c in COLOURS]))


def _items(ds) -> tuple[list, list[int]]:
    pairs = [ds[i] for i in range(len(ds))]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _check_colours(ds) -> list[int]:
    """Every label of ``ds`` is the class its image's colour says, and ``labels`` matches ``__getitem__``."""
    images, labels = _items(ds)
    assert [_colour_class(im) for im in images] == labels
    assert ds.labels.tolist() == labels and ds.labels.dtype == np.int64
    return labels


# ---------------------------------------------------------------- ImageNet

def _imagenet(root: Path, per_class: int = 2) -> Path:
    for c, wnid in enumerate(WNIDS):
        for k in range(per_class):
            _jpeg(root / "train" / wnid / f"{wnid}_{k + 1}.JPEG", COLOURS[c])
    return root


FLAT_VAL = ["n02119789", "n01440764", "n01443537", "n01440764"]  # the true wnid of val image 1, 2, ...


def _flat_val(root: Path) -> list[Path]:
    return [_jpeg(root / "val" / f"ILSVRC2012_val_{i + 1:08d}.JPEG", COLOURS[WNIDS.index(w)])
            for i, w in enumerate(FLAT_VAL)]


def test_imagenet_train_classes_are_the_sorted_wnids_named_by_the_synset_mapping(tmp_path):
    root = _imagenet(tmp_path)
    (root / "LOC_synset_mapping.txt").write_text("".join(f"{w} {WORDS[w]}\n" for w in WNIDS))
    ds = classification_split("imagenet", root, "train")
    assert len(ds) == 6 and ds.num_classes == 3
    assert ds.class_names == ("tench, Tinca tinca", "goldfish, Carassius auratus", "kit fox, Vulpes macrotis")
    assert _check_colours(ds) == [0, 0, 1, 1, 2, 2]
    assert ds[0][0].size == (20, 16) and ds[0][0].mode == "RGB"


def test_imagenet_val_as_class_folders_without_mapping_is_named_by_wnids(tmp_path):
    root = _imagenet(tmp_path)
    for c, wnid in ((2, "n02119789"), (0, "n01440764")):
        _jpeg(root / "val" / wnid / f"ILSVRC2012_val_{c:08d}.JPEG", COLOURS[c])
    ds = classification_split("imagenet", root, "val", transform=lambda im: im.convert("L").convert("RGB"))
    assert ds.class_names == tuple(WNIDS)
    assert ds.labels.tolist() == [0, 2]  # sorted listing; labels indexed by train's classes
    assert ds[0][0].getpixel((0, 0))[0] == ds[0][0].getpixel((0, 0))[1]  # the transform was applied


def test_imagenet_val_class_folder_unknown_to_train_is_malformed(tmp_path):
    root = _imagenet(tmp_path)
    _jpeg(root / "val" / "n09999999" / "x.JPEG", COLOURS[0])
    with pytest.raises(MalformedDatasetError, match="n09999999"):
        classification_split("imagenet", root, "val")


@pytest.mark.parametrize("where", ["root", "val"])
def test_imagenet_flat_val_with_kaggle_solution_csv(tmp_path, where):
    root = _imagenet(tmp_path)
    _flat_val(root)
    rows = [f"ILSVRC2012_val_{i + 1:08d},{w} 10 12 40 44 {w} 1 2 3 4" for i, w in enumerate(FLAT_VAL)]
    (root / ("" if where == "root" else "val") / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\n" + "\n".join(reversed(rows)) + "\n")  # the row order does not matter
    ds = classification_split("imagenet", root, "val")
    assert len(ds) == 4 and _check_colours(ds) == [2, 0, 1, 0]


def test_imagenet_kaggle_csv_naming_an_unknown_wnid_is_malformed(tmp_path):
    root = _imagenet(tmp_path)
    _flat_val(root)
    rows = [f"ILSVRC2012_val_{i + 1:08d},{'n09999999' if i == 2 else w} 1 2 3 4" for i, w in enumerate(FLAT_VAL)]
    (root / "LOC_val_solution.csv").write_text("ImageId,PredictionString\n" + "\n".join(rows) + "\n")
    with pytest.raises(MalformedDatasetError, match="LOC_val_solution.csv names n09999999"):
        classification_split("imagenet", root, "val")


def _meta_mat(path: Path, ids: dict[int, str]) -> None:
    """A devkit ``meta.mat``: a ``synsets`` struct array, the leaves (num_children 0) plus one inner synset."""
    fields = ["ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children", "wordnet_height",
              "num_train_images"]
    synsets = np.zeros(len(ids) + 1, dtype=[(f, "O") for f in fields])
    for row, (i, wnid) in enumerate(sorted(ids.items())):
        synsets[row] = (i, wnid, WORDS[wnid], "a gloss", 0, np.zeros(0), 0, 1300)
    synsets[-1] = (len(ids) + 1, "n00001740", "entity", "the root", 2, np.array([1, 2]), 18, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(path, {"synsets": synsets})


DEVKIT_IDS = {1: "n02119789", 2: "n01440764", 3: "n01443537"}  # the devkit's order is not the sorted one


def test_imagenet_flat_val_with_devkit_ground_truth_uses_meta_mat_order(tmp_path):
    root = _imagenet(tmp_path)
    _flat_val(root)
    devkit = root / "ILSVRC2012_devkit_t12" / "data"
    by_wnid = {w: i for i, w in DEVKIT_IDS.items()}
    devkit.mkdir(parents=True)
    (devkit / "ILSVRC2012_validation_ground_truth.txt").write_text("".join(f"{by_wnid[w]}\n" for w in FLAT_VAL))
    _meta_mat(devkit / "meta.mat", DEVKIT_IDS)
    # a sorted LOC_synset_mapping.txt beside it names the classes but must not reorder the ids
    (root / "LOC_synset_mapping.txt").write_text("".join(f"{w} {WORDS[w]}\n" for w in WNIDS))
    ds = classification_split("imagenet", root, "val")
    assert _check_colours(ds) == [2, 0, 1, 0]
    assert ds.class_names[2] == "kit fox, Vulpes macrotis"


def test_imagenet_ground_truth_without_meta_mat_refuses_the_sorted_mapping(tmp_path):
    root = _imagenet(tmp_path)
    _flat_val(root)
    (root / "ILSVRC2012_validation_ground_truth.txt").write_text("1\n2\n3\n2\n")
    (root / "LOC_synset_mapping.txt").write_text("".join(f"{w} {WORDS[w]}\n" for w in WNIDS))
    with pytest.raises(DatasetNotFoundError, match="meta.mat") as error:
        classification_split("imagenet", root, "val")
    assert "LOC_val_solution.csv" in str(error.value) and str(error.value).count(";") >= 1


def test_imagenet_ground_truth_with_a_missing_line_or_a_non_leaf_id_is_malformed(tmp_path):
    root = _imagenet(tmp_path)
    _flat_val(root)
    (root / "ILSVRC2012_validation_ground_truth.txt").write_text("1\n2\n3\n")
    _meta_mat(root / "meta.mat", DEVKIT_IDS)
    with pytest.raises(MalformedDatasetError, match="3 labels for the 4 images"):
        classification_split("imagenet", root, "val")
    (root / "ILSVRC2012_validation_ground_truth.txt").write_text("1\n2\n4\n2\n")  # 4: meta.mat's inner synset
    with pytest.raises(MalformedDatasetError, match="line 3: '4' is not a class id"):
        classification_split("imagenet", root, "val")


def test_imagenet_flat_val_without_labels_names_the_layouts(tmp_path):
    root = _imagenet(tmp_path)
    _flat_val(root)
    with pytest.raises(DatasetNotFoundError, match="LOC_val_solution.csv"):
        classification_split("imagenet", root, "val")


def test_imagenet_corrupt_image_is_skipped_counted_and_warned_but_read_raises(tmp_path):
    root = _imagenet(tmp_path)
    bad = root / "train" / WNIDS[0] / f"{WNIDS[0]}_0.JPEG"  # sorts first
    whole = _jpeg(tmp_path / "whole.jpg", COLOURS[0], size=(64, 64)).read_bytes()
    bad.write_bytes(whole[: len(whole) // 2])  # truncated
    (tmp_path / "whole.jpg").unlink()
    ds = classification_split("imagenet", root, "train")
    assert len(ds) == 7 and ds.items[0] == bad
    with pytest.warns(CorruptImageWarning, match=bad.name):
        image, label = ds[0]
    assert ds.skipped == 1 and label == 0 and image.size == (20, 16)  # the next image, with its own label
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a file is reported once
        ds[0]
    assert ds.skipped == 2
    with pytest.raises(OSError):
        ds.read(0)
    assert ds.read(1)[1] == 0


# ---------------------------------------------------------------- CIFAR

def _pickle(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(content, f)


def _cifar_images(n: int, seed: int) -> np.ndarray:
    images = np.random.default_rng(seed).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    images[0] = 0
    images[0, :16, :, 0] = 255          # top half red
    images[0, 16:, :16, 1] = 255        # bottom left green
    images[0, 16:, 16:, 2] = 255        # bottom right blue
    return images


def _rows(images: np.ndarray) -> np.ndarray:
    """The official row format: the R plane, then G, then B, each 32x32 row-major."""
    return images.transpose(0, 3, 1, 2).reshape(len(images), 3072)


def _cifar10(root: Path, labelled: bool = True) -> dict[str, tuple[np.ndarray, list[int]]]:
    folder = root / "cifar-10-batches-py"
    written = {}
    for b, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        images = _cifar_images(3 if name == "test_batch" else 2, seed=b)
        labels = [(2 * b + k) % 10 for k in range(len(images))]
        content = {b"batch_label": f"batch {b}".encode(), b"data": _rows(images),
                   b"filenames": [f"{k}.png".encode() for k in range(len(images))]}
        if labelled:
            content[b"labels"] = labels
        _pickle(folder / name, content)
        written[name] = (images, labels)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    _pickle(folder / "batches.meta", {b"num_cases_per_batch": 10000, b"label_names": names, b"num_vis": 3072})
    return written


def test_cifar10_train_and_test_batches_in_memory_with_the_planes_in_order(tmp_path):
    written = _cifar10(tmp_path)
    train = classification_split("cifar10", tmp_path, "train")
    assert len(train) == 10 and train.num_classes == 10 and train.class_names[:3] == ("airplane", "automobile", "bird")
    expected = np.concatenate([written[f"data_batch_{i}"][0] for i in range(1, 6)])
    assert train.items.shape == (10, 32, 32, 3) and train.items.dtype == np.uint8
    images, labels = _items(train)
    assert labels == sum((written[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    assert train.labels.tolist() == labels
    assert all(np.array_equal(np.asarray(im), e) for im, e in zip(images, expected))
    assert images[0].getpixel((5, 3)) == (255, 0, 0) and images[0].getpixel((3, 20)) == (0, 255, 0)
    assert images[0].getpixel((20, 20)) == (0, 0, 255)  # x, y: the planes are not transposed
    val = classification_split("cifar10", tmp_path / "cifar-10-batches-py", "val")  # root = the inner folder
    assert len(val) == 3 and val.labels.tolist() == written["test_batch"][1]
    assert np.array_equal(np.asarray(val[2][0]), written["test_batch"][0][2])


def test_cifar100_fine_labels_and_names(tmp_path):
    folder = tmp_path / "cifar-100-python"
    train_images, test_images = _cifar_images(4, 0), _cifar_images(2, 1)
    for name, images, fine in (("train", train_images, [99, 0, 57, 3]), ("test", test_images, [1, 98])):
        _pickle(folder / name, {b"filenames": [], b"batch_label": b"x", b"data": _rows(images),
                                b"fine_labels": fine, b"coarse_labels": [f % 20 for f in fine]})
    fine_names = [f"fine{i}".encode() for i in range(100)]
    _pickle(folder / "meta", {b"fine_label_names": fine_names, b"coarse_label_names": [b"c"] * 20})
    train = classification_split("cifar100", tmp_path, "train")
    assert train.num_classes == 100 and train.class_names[57] == "fine57"
    assert _items(train)[1] == [99, 0, 57, 3] == train.labels.tolist()
    assert np.array_equal(np.asarray(train[2][0]), train_images[2])
    val = classification_split("cifar100", folder, "val")
    assert val.labels.tolist() == [1, 98] and np.asarray(val[0][0]).tolist() == test_images[0].tolist()


def test_cifar_pickle_without_labels_is_malformed(tmp_path):
    _cifar10(tmp_path, labelled=False)
    with pytest.raises(MalformedDatasetError, match="data_batch_1 has no b'labels' entry"):
        classification_split("cifar10", tmp_path, "train")


def test_cifar_missing_batch_names_the_file_and_layout(tmp_path):
    _cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(DatasetNotFoundError, match="test_batch.*data_batch_1..5"):
        classification_split("cifar10", tmp_path, "val")


# ---------------------------------------------------------------- Tiny ImageNet

TINY = ["n02119789", "n01440764"]  # wnids.txt order, not sorted: class 0 is the kit fox


def _tiny(root: Path, val_wnids=("n01440764", "n02119789", "n01440764")) -> Path:
    base = root / "tiny-imagenet-200"
    base.mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(TINY) + "\n")
    (base / "words.txt").write_text("n00001740\tentity\n" + "".join(f"{w}\t{WORDS[w]}\n" for w in WNIDS))
    for c, wnid in enumerate(TINY):
        for k in range(2):
            _jpeg(base / "train" / wnid / "images" / f"{wnid}_{k}.JPEG", COLOURS[c], size=(64, 64))
        (base / "train" / wnid / f"{wnid}_boxes.txt").write_text(f"{wnid}_0.JPEG\t0\t0\t10\t10\n")
    lines = []
    for k, wnid in enumerate(val_wnids):
        colour = COLOURS[TINY.index(wnid)] if wnid in TINY else COLOURS[3]
        _jpeg(base / "val" / "images" / f"val_{k}.JPEG", colour, size=(64, 64))
        lines.append(f"val_{k}.JPEG\t{wnid}\t1\t2\t30\t40")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return root


def test_tiny_imagenet_classes_in_wnids_order_named_by_words(tmp_path):
    root = _tiny(tmp_path)
    train = classification_split("tiny-imagenet", root, "train")
    assert train.class_names == ("kit fox, Vulpes macrotis", "tench, Tinca tinca")
    assert len(train) == 4 and _check_colours(train) == [0, 0, 1, 1]
    assert train[0][0].size == (64, 64)
    val = classification_split("tiny-imagenet", root / "tiny-imagenet-200", "val")
    assert len(val) == 3 and _check_colours(val) == [1, 0, 1]


def test_tiny_imagenet_val_annotation_with_unknown_wnid_is_malformed(tmp_path):
    root = _tiny(tmp_path, val_wnids=("n01440764", "n01443537"))
    with pytest.raises(MalformedDatasetError, match="val_annotations.txt line 2 names 'n01443537'"):
        classification_split("tiny-imagenet", root, "val")


# ---------------------------------------------------------------- default, errors, registry

def test_default_reader_labels_scenes_by_their_dominant_class(tmp_path):
    root = write_voc(tmp_path, n_train=4, n_val=2, classes=CLASSES)
    train = classification_split("default", root, "train")
    assert train.class_names == tuple(CLASSES[1:]) and len(train) == 4
    images, labels = _items(train)
    assert labels == [0, 1, 2, 3] == train.labels.tolist()  # the fixture's rectangle j has class 1 + j
    jpeg = root / "VOCdevkit" / "VOC2012" / "JPEGImages" / "000002.jpg"
    assert np.array_equal(np.asarray(images[2]), np.asarray(Image.open(jpeg).convert("RGB")))
    assert classification_split("default", root, "val").labels.tolist() == [0, 1]


@pytest.mark.parametrize("name, layout", [("imagenet", "train/<wnid>/*.JPEG"), ("cifar10", "cifar-10-batches-py"),
                                          ("cifar100", "cifar-100-python/{train, test, meta}"),
                                          ("tiny-imagenet", "val/val_annotations.txt")])
def test_missing_root_names_the_layout_in_one_sentence(tmp_path, name, layout):
    with pytest.raises(DatasetNotFoundError) as error:
        classification_split(name, tmp_path / "nowhere", "train")
    message = str(error.value)
    assert layout in message and "nowhere" in message and "data/README.md" in message
    assert "\n" not in message


def test_unknown_name_lists_the_readers_and_every_reader_is_registered():
    assert {"default", "imagenet", "cifar10", "cifar100", "tiny-imagenet", "mnist", "digits"} <= set(READERS)
    with pytest.raises(UnknownDatasetError, match="unknown classification dataset .svhn.") as error:
        classification_split("svhn", "data", "train")
    assert all(name in str(error.value) for name in READERS)


def test_a_data_root_that_is_imagenets_train_folder_says_to_give_the_folder_above(tmp_path):
    root = _imagenet(tmp_path / "imagenet")
    with pytest.raises(DatasetNotFoundError) as err:
        classification_split("imagenet", root / "train", "train")
    assert (f"the data root {root / 'train'} is the dataset's own folder train; give the folder that holds it "
            f"instead, DATA_ROOT={root} (expected") in str(err.value)
