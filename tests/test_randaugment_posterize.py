"""The supervised recipe's RandAugment (``rand-m9-mstd0.5-inc1``) on Pillow 13: a magnitude drawn at its upper
bound asks ``PosterizeIncreasing`` for 0 bits, which Pillow 13 refuses and Pillow up to 12 turned into a black
image (``skipless/supervised/augment.py``, ``posterize_any_bits``)."""
import random

import numpy as np
import pytest
from PIL import Image
from timm.data import auto_augment

from skipless.config import load_config
from skipless.supervised.augment import posterize_any_bits, train_transform


def image() -> Image.Image:
    return Image.fromarray(np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8))


@pytest.mark.parametrize("bits", [-1, 0, 1, 3, 7, 8, 9])
def test_posterize_keeps_the_top_bits_of_every_value_and_zero_bits_is_black(bits):
    ours = np.asarray(posterize_any_bits(image(), bits))
    keep = min(max(bits, 0), 8)
    mask = (0xFF << (8 - keep)) & 0xFF  # the top `keep` bits, written out independently
    np.testing.assert_array_equal(ours, np.asarray(image()) & mask)


def test_the_recipes_randaugment_at_its_largest_magnitude_posterizes_to_black_instead_of_failing(monkeypatch):
    paper = load_config("train", ["data=imagenet", "aug.image_size=32"]).aug  # the paper recipe follows the data
    assert paper.auto_augment == "rand-m9-mstd0.5-inc1"
    op = auto_augment.AugmentOp("PosterizeIncreasing", prob=1.0, magnitude=9,
                                hparams={"magnitude_std": 0.5})
    monkeypatch.setattr(random, "gauss", lambda mu, sigma: 12.0)  # drawn above the bound, clipped to 10: 0 bits
    assert not np.asarray(op(image())).any()
    assert train_transform(paper)(image()).shape == (3, 32, 32)  # the recipe's transform builds and runs
