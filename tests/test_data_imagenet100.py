"""ImageNet-100 (``skipless/data/classification/imagenet_subset.py``): CMC's class list, and ``make data
DATA=imagenet100`` linking its class folders out of an ImageNet root, refusing in one sentence (before
writing anything) missing classes, a flat val and an output folder that holds anything else. The ImageNet
tree is a fake of tiny JPEGs (``fake_layouts.py``)."""
import os
import re
from pathlib import Path

import pytest

from skipless.data.generator.fake_layouts import write_fake_imagenet
from skipless.data.classification.imagenet_subset import SUBSETS, SubsetFolderError, build_subset, main, subset_wnids
from skipless.data.classification.registry import classification_split
from skipless.data.errors import DatasetNotFoundError, MalformedDatasetError
from skipless.data.image_folder import ImageFolderDataset

ROOT = Path(__file__).resolve().parents[1]
EXTRA = "n01440764"  # an ImageNet-1k class that is not one of the 100
LIST, DEFAULT_OUT = SUBSETS["imagenet100"].wnids_file, SUBSETS["imagenet100"].default_out


def imagenet100_wnids() -> tuple[str, ...]:
    return subset_wnids("imagenet100")


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    """A fake ImageNet: one JPEG per class and split for the 100 classes and one more, and the class names."""
    root = write_fake_imagenet(tmp_path_factory.mktemp("imagenet"), [*imagenet100_wnids(), EXTRA])
    (root / "LOC_synset_mapping.txt").write_text("".join(f"{w} name of {w}\n" for w in [EXTRA, *imagenet100_wnids()]))
    return root


def _tree(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (not following links): relative path -> link target or "dir"/"file"."""
    out = {}
    for path in sorted(folder.rglob("*")):
        out[path.relative_to(folder).as_posix()] = (os.readlink(path) if path.is_symlink()
                                                    else "dir" if path.is_dir() else "file")
    return out


def test_the_class_list_is_cmcs_100_distinct_imagenet_1k_classes():
    from timm.data import ImageNetInfo

    wnids = imagenet100_wnids()
    assert len(wnids) == len(set(wnids)) == 100
    assert set(wnids) <= set(ImageNetInfo().label_names())  # timm's 1,000 ImageNet-1k synsets
    # CMC's imagenet100.txt begins and ends so (github.com/HobbitLong/CMC), and its header cites it
    assert wnids[:3] == ("n02869837", "n01749939", "n02488291") and wnids[-2:] == ("n01855672", "n02090622")
    assert "Contrastive Multiview Coding" in LIST.read_text() and "HobbitLong/CMC" in LIST.read_text()


def test_make_data_links_every_class_folder_and_the_readers_read_the_subset(imagenet, tmp_path, capsys):
    out = tmp_path / "sub" / "imagenet100"
    built = build_subset(imagenet, out)
    tree = _tree(out)
    wnids = imagenet100_wnids()
    expected = {"train": "dir", "val": "dir"}
    expected.update({f"{s}/{w}": str(imagenet.resolve() / s / w) for s in ("train", "val") for w in wnids})
    expected["LOC_synset_mapping.txt"] = str(imagenet.resolve() / "LOC_synset_mapping.txt")
    assert tree == expected  # links to the class folders, nothing copied, the extra class left out
    assert built.written and built.images == {"train": 100, "val": 100} and built.classes == 100
    assert re.fullmatch(r"ImageNet-100: linked the 100 classes of imagenet100.txt \(CMC's list\) of .* into .*: "
                        r"100 train \+ 100 val images", built.line())
    val = classification_split("imagenet", out, "val")  # what the MAE experiments' probes read
    assert val.num_classes == 100 and len(val) == 100 and val.class_names[0] == f"name of {min(wnids)}"
    assert len(ImageFolderDataset(out / "train").files) == 100  # what their pretraining reads
    again = build_subset(imagenet, out)
    assert not again.written and _tree(out) == tree and "already links" in again.line()


def test_missing_classes_are_one_sentence_and_nothing_is_written(imagenet, tmp_path):
    source = tmp_path / "imagenet"
    for split in ("train", "val"):
        (source / split).mkdir(parents=True)
        for wnid in imagenet100_wnids():
            if not (split == "val" and wnid in ("n02869837", "n02090622")):
                (source / split / wnid).symlink_to(imagenet / split / wnid)
    with pytest.raises(DatasetNotFoundError) as error:
        build_subset(source, tmp_path / "out")
    message = str(error.value)
    assert "lacks 2 of the 100 ImageNet-100 classes" in message and "no val/n02869837, val/n02090622;" in message
    assert "\n" not in message and not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["imagenet"]  # no staging folder either


def test_a_flat_val_is_refused_in_one_sentence(tmp_path):
    root = write_fake_imagenet(tmp_path / "imagenet", imagenet100_wnids()[:1], splits=("train",))
    (root / "val").mkdir()
    (root / "val" / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"")
    with pytest.raises(MalformedDatasetError, match=r"val holds its images flat, but ImageNet-100 links class folders"):
        build_subset(root, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("existing, difference", [
    ("file", r"notes.txt is not part of it"),
    ("other source", r"train/n02869837 links to .*elsewhere/train/n02869837, not .*/train/n02869837"),
])
def test_a_folder_holding_anything_else_is_never_overwritten(imagenet, tmp_path, existing, difference):
    out = tmp_path / "imagenet100"
    if existing == "file":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    else:
        build_subset(imagenet, out)
        link = out / "train" / "n02869837"
        link.unlink()
        link.symlink_to(tmp_path / "elsewhere" / "train" / "n02869837")
    before = _tree(out)
    with pytest.raises(SubsetFolderError, match=rf"already holds something other than the ImageNet-100 subset .*"
                                                rf"\({difference}\); it is never overwritten"):
        build_subset(imagenet, out)
    assert _tree(out) == before


def test_an_empty_output_folder_is_used(imagenet, tmp_path):
    (tmp_path / "out").mkdir()
    assert build_subset(imagenet, tmp_path / "out").written and len(os.listdir(tmp_path / "out" / "train")) == 100


def test_the_command_takes_its_roots_from_the_environment_and_says_what_is_missing(imagenet, tmp_path, monkeypatch,
                                                                                 capsys):
    monkeypatch.delenv("IMAGENET_ROOT", raising=False)
    with pytest.raises(SystemExit, match=r"^error: ImageNet-100 is built from ImageNet-1k: name its folder with "
                                         r"IMAGENET_ROOT="):
        main([])
    monkeypatch.setenv("IMAGENET_ROOT", str(imagenet))
    monkeypatch.setenv("IMAGENET100_ROOT", str(tmp_path / "in100"))
    main([])
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("ImageNet-100: linked the 100 classes")
    assert len(os.listdir(tmp_path / "in100" / "val")) == 100


def test_the_default_output_is_where_the_mae_experiments_look():
    for name in ("mae-table2", "mae-table3", "mae-figure3", "mae-figure5"):
        text = (ROOT / "configs" / "experiments" / f"{name}.yaml").read_text()
        assert set(re.findall(r"\$\{oc\.env:IMAGENET100_ROOT,([^}]*)\}", text)) == {DEFAULT_OUT}, name
