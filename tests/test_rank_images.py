"""The images the effective-rank monitor measures (training/data.py evenly_spaced): spread over the split, so that in
a class-sorted image folder (ImageNet's, ImageNet-10's) every class is in them, where the first N would be one."""
import torch

from skipless.config import load_config
from skipless.data.generator.fake_layouts import write_fake_imagenet
from skipless.training.data import diagnostic_images, evenly_spaced


def test_evenly_spaced_indices_start_at_zero_and_cover_the_range():
    assert evenly_spaced(4, 12) == [0, 3, 6, 9]
    assert evenly_spaced(3, 10) == [0, 3, 6]
    assert evenly_spaced(20, 5) == [0, 1, 2, 3, 4]  # never more than the split holds


def test_the_rank_images_of_a_class_sorted_folder_hold_every_class(tmp_path):
    root = write_fake_imagenet(tmp_path / "imagenet", ["n01", "n02", "n03", "n04"], per_class=3, size=32)
    cfg = load_config("pretrain", ["data=imagenet", f"data.root={root}/train"])

    def colours(images: torch.Tensor) -> int:  # one flat colour per class (write_fake_imagenet)
        return len({tuple(img.mean(dim=(1, 2)).round(decimals=2).tolist()) for img in images})

    assert colours(diagnostic_images(cfg, 32, 4, spread=True)) == 4
    assert colours(diagnostic_images(cfg, 32, 4)) == 2  # the first 4 of 12: classes 1 and 2 only
