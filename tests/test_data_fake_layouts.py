"""The pre-flight's fake datasets: each layout is accepted by the real reader of its dataset, with the
splits, sizes and label spaces the real one has; a real dataset's folder is never written into."""
import numpy as np
import pytest

from skipless.config import ConfigError
from skipless.data import ImageFolderDataset, build_discovery, build_split
from skipless.data.classification.registry import classification_split
from skipless.data.errors import MalformedDatasetError
from skipless.data.generator.fake_layouts import ARRANGEMENT, FAKE_TAG, FakeSizes, write_fake_datasets

SIZES = FakeSizes(classes=2, train_per_class=2, val_per_class=1)


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return write_fake_datasets(tmp_path_factory.mktemp("fake") / "data", SIZES, seed=0, scale=2)


def test_every_layout_is_written_in_the_arrangement_of_data_readme(fake):
    assert set(fake) == set(ARRANGEMENT) >= {"imagenet", "imagenet100", "voc", "ade20k", "cocostuff", "coco"}
    assert all((folder / FAKE_TAG).is_file() and folder.name == name for name, folder in fake.items())


@pytest.mark.parametrize("name", ["imagenet", "imagenet100", "imagenet10"])
def test_imagenet_layouts_read_as_labelled_splits_and_as_a_pretraining_folder(fake, name):
    train, val = (classification_split("imagenet", fake[name], s) for s in ("train", "val"))
    assert (len(train), len(val)) == (SIZES.train, SIZES.val) and sorted(set(train.labels)) == [0, 1]
    image, label = val[0]
    assert min(image.size) >= 320 and label == 0  # 2 x the scenes' 160-224 px
    assert len(ImageFolderDataset(fake[name] / "train")) == SIZES.train


def test_tiny_imagenet_is_64_px_in_its_zip_layout(fake):
    val = classification_split("tiny-imagenet", fake["tiny-imagenet"], "val")
    assert len(val) == SIZES.val and val[0][0].size == (64, 64) and len(val.class_names) == 2


@pytest.mark.parametrize("name, splits, classes", [
    ("voc", ("train", "val"), 21), ("ade20k", ("training", "validation"), 150),
    ("cocostuff", ("train2017", "val2017"), 171)])
def test_segmentation_layouts_give_train_ids_of_the_real_label_space(fake, name, splits, classes):
    train, val = (build_split(name, fake[name], s) for s in splits)
    assert (len(train), len(val), train.num_classes) == (SIZES.train, SIZES.val, classes)
    masks = np.concatenate([train.mask(i).ravel() for i in range(len(train))])
    labelled = masks[masks != 255]
    assert labelled.size and labelled.max() < classes and len(np.unique(labelled)) >= 2
    assert train.mask(0).shape == train.image(0).size[::-1]


@pytest.mark.parametrize("name, root", [("voc07", "voc"), ("voc12", "voc"), ("coco20k", "coco")])
def test_discovery_layouts_give_boxes_inside_their_images(fake, name, root):
    data = build_discovery(name, fake[root])
    assert len(data) == SIZES.train + SIZES.val
    image, boxes = data[0]
    assert len(boxes) >= 1 and (boxes[:, 2] <= image.width).all() and (boxes[:, 3] <= image.height).all()
    if name == "coco20k":  # the crowd box over the first image is dropped, as COCO's crowds are
        whole = (boxes[:, 2] - boxes[:, 0] >= image.width - 1) & (boxes[:, 3] - boxes[:, 1] >= image.height - 1)
        assert not whole.all()


def test_a_real_datasets_folder_and_impossible_sizes_are_refused_before_writing(tmp_path):
    (tmp_path / "voc").mkdir()
    (tmp_path / "voc" / "mine.txt").write_text("a real dataset")
    with pytest.raises(MalformedDatasetError, match=r"voc exists and is no fake dataset"):
        write_fake_datasets(tmp_path, SIZES, seed=0, scale=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["voc"]
    with pytest.raises(ConfigError, match=r"expected 1 to 10 classes"):
        write_fake_datasets(tmp_path / "new", FakeSizes(11, 1, 1), seed=0, scale=1)
    assert not (tmp_path / "new").exists()


def test_mnist_layout_is_read_by_the_idx_reader_as_28_px_grey_digits(fake):
    train, val = (classification_split("mnist", fake["mnist"], s) for s in ("train", "val"))
    assert (len(train), len(val)) == (SIZES.train, SIZES.val) and sorted(set(train.labels)) == [0, 1]
    image, _ = train[0]
    assert image.size == (28, 28) and np.asarray(image).std() > 0  # a scene, not a blank


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_layouts_are_read_by_the_pickle_reader_as_32_px_scenes(fake, name):
    train, val = (classification_split(name, fake[name], s) for s in ("train", "val"))
    assert (len(train), len(val)) == (SIZES.train, SIZES.val) and sorted(set(train.labels)) == [0, 1]
    assert len(train.class_names) == SIZES.classes
    image, _ = train[0]
    assert image.size == (32, 32) and image.mode == "RGB" and np.asarray(image).std() > 0
