"""MNIST from its IDX files (``skipless/data/classification/{idx,mnist}.py``): the reader serves exactly the
pixels and labels written, gzipped or not, in each accepted folder layout; a missing or corrupt file is one
sentence naming it; ``make train DATA=mnist`` resolves to the osa-mnist recipe (seeds/004, Appendix E) and
trains on the files. The files are written here by ``fake_layouts.py`` (no download, ever)."""
import gzip
import json

import numpy as np
import pytest

from skipless.config import load_config
from skipless.data.generator.fake_layouts import fake_digits, write_fake_mnist, write_mnist
from skipless.data.classification.idx import write_idx
from skipless.data.classification.registry import classification_split
from skipless.data.errors import DatasetNotFoundError, MalformedDatasetError


def _served(split):
    """The grey plane of every image the reader serves (checking the three channels are equal) and the labels."""
    rgb = np.stack([np.asarray(split.image(i)) for i in range(len(split))])
    assert rgb.shape[1:] == (28, 28, 3) and (rgb == rgb[..., :1]).all()
    return rgb[..., 0], split.labels


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("where", ["MNIST/raw", "raw", "files"])
def test_the_reader_serves_exactly_the_written_pixels_and_labels(tmp_path, gz, where):
    folder = {"MNIST/raw": tmp_path / "MNIST" / "raw", "raw": tmp_path / "raw", "files": tmp_path}[where]
    written = {"train": fake_digits(7, seed=1), "val": fake_digits(4, seed=2)}
    for split, (images, labels) in written.items():
        write_mnist(folder, split, images, labels, gz=gz)
    for split, (images, labels) in written.items():
        served = classification_split("mnist", tmp_path, split)
        pixels, served_labels = _served(served)
        np.testing.assert_array_equal(pixels, images)
        np.testing.assert_array_equal(served_labels, labels)
        assert served.class_names == tuple("0123456789") and served.name == f"MNIST {split}"


def test_the_plain_file_is_read_where_its_gzip_lies_beside_it(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    plain, other = fake_digits(3, seed=0), fake_digits(3, seed=5)
    write_mnist(raw, "train", *plain)
    write_mnist(raw, "train", *other, gz=True)
    np.testing.assert_array_equal(_served(classification_split("mnist", tmp_path, "train"))[0], plain[0])


def test_idx_files_are_written_as_the_mnist_page_states(tmp_path):
    """magic 0x00000803 / 0x00000801, big-endian dimensions, the bytes in C order; gzip when named .gz."""
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    data = write_idx(tmp_path / "a-idx3-ubyte", images).read_bytes()
    assert data[:16] == bytes([0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4]) and data[16:] == bytes(range(24))
    labels = write_idx(tmp_path / "b-idx1-ubyte.gz", np.array([7, 0, 9], dtype=np.uint8)).read_bytes()
    assert gzip.decompress(labels) == bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 0, 9])


def test_a_missing_folder_or_file_is_one_sentence_naming_the_layout(tmp_path):
    with pytest.raises(DatasetNotFoundError) as error:
        classification_split("mnist", tmp_path / "nowhere", "train")
    message = str(error.value)
    assert "MNIST not found" in message and "nowhere/MNIST/raw" in message and "data/README.md" in message
    assert "t10k-labels-idx1-ubyte" in message and ".gz" in message and "\n" not in message
    write_mnist(tmp_path / "MNIST" / "raw", "train", *fake_digits(2))
    with pytest.raises(DatasetNotFoundError, match=r"MNIST file t10k-images-idx3-ubyte \(or t10k-images-idx3-ubyte.gz\)"):
        classification_split("mnist", tmp_path, "val")


def _break(raw, how):
    """Damage one file of a fake MNIST's train split; returns the damaged file's name."""
    images, labels = raw / "train-images-idx3-ubyte", raw / "train-labels-idx1-ubyte"
    if how == "truncated":
        images.write_bytes(images.read_bytes()[:-5])
    elif how == "left over":
        labels.write_bytes(labels.read_bytes() + b"\x00")
    elif how == "magic":
        labels.write_bytes(images.read_bytes())  # an image file where the labels should be
    elif how == "header":
        images.write_bytes(b"\x00\x00\x08\x03\x00")
    elif how == "count":
        write_idx(labels, np.zeros(3, dtype=np.uint8))
    elif how == "gzip":
        gz = raw / "train-images-idx3-ubyte.gz"
        gz.write_bytes(gzip.compress(images.read_bytes())[:40])
        images.unlink()
        return gz.name
    return images.name if how in ("truncated", "header", "count") else labels.name


@pytest.mark.parametrize("how, expected", [
    ("truncated", r"is truncated: its header announces 5 x 28 x 28 = 3920 values but 3915 bytes follow it"),
    ("left over", r"has bytes left over: its header announces 5 values but 6 bytes follow it"),
    ("magic", r"starts with the magic number 0x00000803, not 0x00000801; expected an IDX file of MNIST labels"),
    ("header", r"is truncated: 5 bytes, fewer than the 16-byte header of an IDX file of MNIST images"),
    ("count", r"holds 5 images but .*train-labels-idx1-ubyte holds 3 labels"),
    ("gzip", r"is not a readable gzip file"),
])
def test_a_corrupt_file_is_one_sentence_naming_it_and_what_was_expected(tmp_path, how, expected):
    write_fake_mnist(tmp_path, n_train=5, n_val=2, gz=False)
    name = _break(tmp_path / "MNIST" / "raw", how)
    with pytest.raises(MalformedDatasetError, match=expected) as error:
        classification_split("mnist", tmp_path, "train")
    assert name in str(error.value) and "\n" not in str(error.value)


def test_make_train_data_mnist_is_appendix_e_on_the_folder_of_data_root(tmp_path, monkeypatch):
    from test_train_digits import APPENDIX_E, _get

    monkeypatch.setenv("DATA_ROOT", str(tmp_path))  # what `make train DATA=mnist DATA_ROOT=...` exports
    cfg = load_config("train", ["data=mnist", "model=skip"])
    assert cfg.choices["recipe"] == "osa-mnist" and cfg.data.root == str(tmp_path)
    assert {k: _get(cfg, k) for k in APPENDIX_E} == {**APPENDIX_E, "data.name": "mnist"}


def test_a_short_run_on_mnist_files_finishes_with_the_test_set_as_val(tmp_path):
    from skipless.train import run_dir_of, train

    write_fake_mnist(tmp_path / "mnist", n_train=16, n_val=6, gz=True)
    cfg = load_config("train", ["data=mnist", f"data.root={tmp_path / 'mnist'}", "model=skip", "model.depth=1",
                                "train.epochs=1", "train.batch_size_per_device=8", "train.log_every_n_steps=1",
                                f"run.root={tmp_path / 'runs'}"])
    train(cfg)
    summary = json.loads((run_dir_of(cfg) / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 2 and np.isfinite(summary["final_loss"])
    assert round(summary["val"]["top1"] * 6 / 100, 6).is_integer()  # a share of the 6 test images
