"""The ``digits`` reader: scikit-learn's 8 x 8 digits upsampled to 28 x 28 RGB, a fixed stratified 80/20
split, no folder needed (``skipless/data/classification/digits.py``)."""
import numpy as np
import pytest
from scipy.ndimage import map_coordinates
from sklearn.datasets import load_digits

from skipless.data.classification.registry import classification_split
from skipless.data.classification.digits import split_indices


@pytest.fixture(scope="module")
def sklearn_digits():
    return load_digits()


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    root = tmp_path_factory.mktemp("empty") / "no-such-folder"  # never read: the data ship with sklearn
    return {s: classification_split("digits", root, s) for s in ("train", "val")}


def _source_index(split: str, sklearn_digits) -> np.ndarray:
    """For each sample of a split, the index of the sklearn image it was made from: the reader serves
    the split's indices in increasing order."""
    return split_indices(sklearn_digits.target)[split]


def test_shapes_dtype_classes_and_no_folder(splits):
    for ds in splits.values():
        assert ds.items.shape == (len(ds), 28, 28, 3) and ds.items.dtype == np.uint8
        assert ds.class_names == tuple("0123456789") and ds.num_classes == 10
        image, label = ds[0]
        assert image.size == (28, 28) and image.mode == "RGB" and label == ds.labels[0]
        assert np.array_equal(ds.items[..., 0], ds.items[..., 1]) and np.array_equal(ds.items[..., 0], ds.items[..., 2])
        assert ds.items.min() == 0 and ds.items.max() == 255  # 0..16 scaled to the full 0..255


def test_split_sizes_disjoint_stratified_and_labels_are_sklearns(splits, sklearn_digits):
    train, val = splits["train"], splits["val"]
    assert (len(train), len(val)) == (1438, 359)
    index = {s: _source_index(s, sklearn_digits) for s in splits}
    assert not set(index["train"]) & set(index["val"])
    assert sorted(np.concatenate(list(index.values()))) == list(range(1797))
    for s, ds in splits.items():
        assert np.array_equal(ds.labels, sklearn_digits.target[index[s]])
    per_class = np.bincount(sklearn_digits.target)
    assert np.array_equal(np.bincount(val.labels), np.round(0.2 * per_class).astype(int))
    assert np.array_equal(np.bincount(train.labels) + np.bincount(val.labels), per_class)


def test_the_split_is_the_same_on_every_call_and_pinned(splits, sklearn_digits):
    again = classification_split("digits", "elsewhere", "val")
    assert np.array_equal(again.items, splits["val"].items) and np.array_equal(again.labels, splits["val"].labels)
    # pinned: a change of the split (seed, fraction, generator) would silently change every digits run;
    # these are the first val indices the reader drew when it was written
    assert split_indices(sklearn_digits.target)["val"][:8].tolist() == [3, 7, 13, 19, 36, 38, 43, 48]


def _bilinear(a: np.ndarray, n: int = 28) -> np.ndarray:
    """Bilinear resize written out (half-pixel centres, edges clamped): PIL's rule for upsampling."""
    s = np.clip((np.arange(n) + 0.5) * a.shape[0] / n - 0.5, 0, a.shape[0] - 1)
    i0 = np.floor(s).astype(int)
    i1, w = np.minimum(i0 + 1, a.shape[0] - 1), s - np.floor(s)
    rows = a[i0] * (1 - w)[:, None] + a[i1] * w[:, None]
    return rows[:, i0] * (1 - w)[None] + rows[:, i1] * w[None]


def test_images_are_the_bilinearly_upsampled_digits(splits, sklearn_digits):
    for s, ds in splits.items():
        source = sklearn_digits.images[_source_index(s, sklearn_digits)] * 255 / 16
        expected = np.stack([_bilinear(d) for d in source])
        assert np.abs(ds.items[..., 0] - expected).max() <= 1.0  # float32 in PIL, then rounded


def test_sampled_back_at_the_pixel_centres_each_image_is_its_own_digit(splits, sklearn_digits):
    """Independent of the resampling rule: each 28 x 28 image, read at the centres of the 8 x 8 source
    pixels, is within 15 levels rms of its sklearn digit and nearer to it than to any other digit."""
    reference = (sklearn_digits.images * 255 / 16).reshape(1797, 64)
    centres = np.arange(8) * 3.5 + 1.25  # source pixel i covers output pixels 3.5 i .. 3.5 (i + 1)
    rows, cols = np.meshgrid(centres, centres, indexing="ij")
    for s, ds in splits.items():
        back = np.stack([map_coordinates(im[..., 0].astype(float), [rows, cols], order=1).ravel() for im in ds.items])
        distance = (back ** 2).sum(1)[:, None] + (reference ** 2).sum(1)[None] - 2 * back @ reference.T
        own = _source_index(s, sklearn_digits)
        assert np.sqrt(distance[np.arange(len(ds)), own].max() / 64) < 15
        assert np.array_equal(distance.argmin(1), own)
