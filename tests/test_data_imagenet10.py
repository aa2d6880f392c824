"""ImageNet-10 (``skipless/data/classification/imagenet_subset.py``, ``SUBSETS["imagenet10"]``): Imagenette's
10 classes, and ``make data DATA=imagenet10`` linking exactly their class folders out of an ImageNet root with the
builder ImageNet-100 uses, refusing in one sentence that names the subset (before writing anything) a root that
lacks one of them. The ImageNet tree is a fake of tiny JPEGs (``fake_layouts.py``)."""
import os
from dataclasses import replace
from pathlib import Path

import pytest

from skipless.data.classification.imagenet_subset import SUBSETS, build_subset, main, subset_wnids
from skipless.data.classification.registry import classification_split
from skipless.data.errors import DatasetNotFoundError, MalformedDatasetError, UnknownDatasetError
from skipless.data.generator.fake_layouts import write_fake_imagenet

# Imagenette's classes as github.com/fastai/imagenette's README names them, with the wnids of its class folders
IMAGENETTE = {"n01440764": "tench", "n02102040": "English springer", "n02979186": "cassette player",
              "n03000684": "chain saw", "n03028079": "church", "n03394916": "French horn",
              "n03417042": "garbage truck", "n03425413": "gas pump", "n03445777": "golf ball",
              "n03888257": "parachute"}
OTHERS = ("n01443537", "n02869837")  # goldfish (not in Imagenette), and the first of CMC's ImageNet-100


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    """A fake ImageNet: one JPEG per class and split for Imagenette's 10 classes and two others."""
    return write_fake_imagenet(tmp_path_factory.mktemp("imagenet"), [*IMAGENETTE, *OTHERS])


def _tree(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (not following links): relative path -> link target or "dir"/"file"."""
    return {p.relative_to(folder).as_posix(): (os.readlink(p) if p.is_symlink() else "dir" if p.is_dir() else "file")
            for p in sorted(folder.rglob("*"))}


def test_the_class_list_is_imagenettes_10_distinct_imagenet_1k_classes():
    from timm.data import ImageNetInfo

    wnids = subset_wnids("imagenet10")
    assert len(set(wnids)) == len(wnids) == 10 and wnids == tuple(sorted(IMAGENETTE))
    info = ImageNetInfo()  # timm's 1,000 ImageNet-1k synsets and their WordNet lemmas
    assert set(wnids) <= set(info.label_names())
    for wnid, name in IMAGENETTE.items():  # each wnid is the class Imagenette names (parachute is not n03888605)
        assert info.label_name_to_description(wnid).lower().startswith(name.lower()), wnid
    header = SUBSETS["imagenet10"].wnids_file.read_text()
    assert "fastai/imagenette" in header and "does not say which 10" in header


def test_make_data_imagenet10_links_exactly_its_classes_and_the_reader_reads_them(imagenet, tmp_path):
    out = tmp_path / "imagenet10"
    built = build_subset(imagenet, out, "imagenet10")
    expected = {"train": "dir", "val": "dir"}
    expected.update({f"{s}/{w}": str(imagenet.resolve() / s / w) for s in ("train", "val") for w in IMAGENETTE})
    assert _tree(out) == expected  # the two other classes left out, nothing copied (the fake has no class names)
    assert built.written and built.classes == 10 and built.images == {"train": 10, "val": 10}
    assert built.line().startswith("ImageNet-10: linked the 10 classes of imagenet10.txt (Imagenette's classes) of ")
    val = classification_split("imagenet", out, "val")
    assert val.num_classes == 10 and list(val.class_names) == sorted(IMAGENETTE)
    again = build_subset(imagenet, out, "imagenet10")
    assert not again.written and again.line().startswith(f"ImageNet-10: {out} already links the 10 classes")


def test_a_root_lacking_one_class_is_refused_in_one_sentence_naming_the_subset(imagenet, tmp_path):
    source = tmp_path / "imagenet"
    for split in ("train", "val"):
        (source / split).mkdir(parents=True)
        for wnid in [*IMAGENETTE, *OTHERS]:
            if wnid != "n03888257":
                (source / split / wnid).symlink_to(imagenet / split / wnid)
    with pytest.raises(DatasetNotFoundError) as error:
        build_subset(source, tmp_path / "out", "imagenet10")
    message = str(error.value)
    assert "lacks 1 of the 10 ImageNet-10 classes (imagenet10.txt, Imagenette's classes): " in message
    assert "no train/n03888257, val/n03888257;" in message and "nothing was written" in message
    assert "\n" not in message and sorted(p.name for p in tmp_path.iterdir()) == ["imagenet"]


def test_a_class_list_of_the_wrong_length_and_an_unknown_subset_are_one_sentence(imagenet, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("# nine of the ten\n" + "".join(f"{w}\n" for w in sorted(IMAGENETTE)[:9]))
    with pytest.raises(MalformedDatasetError, match=r"short.txt lists 9 wnids \(9 distinct\); expected 10, the "
                                                    r"ImageNet-10 classes$"):
        build_subset(imagenet, tmp_path / "out", replace(SUBSETS["imagenet10"], wnids_file=short))
    with pytest.raises(UnknownDatasetError, match=r"^unknown ImageNet subset 'imagenet20'; expected one of: "
                                                  r"imagenet100, imagenet10$"):
        build_subset(imagenet, tmp_path / "out", "imagenet20")
    assert not (tmp_path / "out").exists()


def test_the_command_builds_imagenet10_into_its_own_variable(imagenet, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("IMAGENET_ROOT", raising=False)
    with pytest.raises(SystemExit, match=r"^error: ImageNet-10 is built from ImageNet-1k: .*"
                                         r"\(make data DATA=imagenet10 IMAGENET_ROOT=\.\.\.; "):
        main(["--subset", "imagenet10"])
    monkeypatch.setenv("IMAGENET_ROOT", str(imagenet))
    monkeypatch.setenv("IMAGENET10_ROOT", str(tmp_path / "in10"))
    monkeypatch.setenv("IMAGENET100_ROOT", str(tmp_path / "in100"))  # ImageNet-100's folder: not this one
    main(["--subset", "imagenet10"])
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("ImageNet-10: linked the 10 classes")
    assert sorted(os.listdir(tmp_path / "in10" / "train")) == sorted(IMAGENETTE)
    assert not (tmp_path / "in100").exists()
    main(["--subset", "imagenet10", "--out", str(tmp_path / "given")])  # --out (make's IMAGENET10_ROOT=) wins
    assert len(os.listdir(tmp_path / "given" / "val")) == 10
    monkeypatch.delenv("IMAGENET10_ROOT")
    monkeypatch.chdir(tmp_path)
    main(["--subset", "imagenet10"])  # neither: data/imagenet10, data/README.md's arrangement
    assert SUBSETS["imagenet10"].default_out == "data/imagenet10"
    assert len(os.listdir(tmp_path / "data" / "imagenet10" / "train")) == 10


def test_make_train_data_imagenet10_reads_the_subset_with_the_imagenet_reader(monkeypatch):
    from skipless.config import load_config
    from skipless.supervised.schema import check_train_config

    monkeypatch.delenv("IMAGENET10_ROOT", raising=False)
    cfg = load_config("train", ["data=imagenet10"])
    check_train_config(cfg)
    assert (cfg.data.name, cfg.data.root) == ("imagenet10", SUBSETS["imagenet10"].default_out)
    monkeypatch.setenv("IMAGENET10_ROOT", "/data/imagenette2")  # an Imagenette download, or the built subset
    assert load_config("train", ["data=imagenet10"]).data.root == "/data/imagenette2"


def _write_fake_imagenette(root: Path) -> Path:
    """Imagenette as its archive unpacks (imagenette2/): ``train/<wnid>/`` and ``val/<wnid>/`` class folders (train
    names ``<wnid>_<k>.JPEG``, val ImageNet's ``ILSVRC2012_val_<8 digits>.JPEG``) and ``noisy_imagenette.csv``
    beside them. Each class is one flat grey, 10 + 20 x its sorted index, so a label can be checked on the pixels;
    train holds a JPEG and a PNG per class, val a JPEG. The folders are made in reverse order."""
    from PIL import Image

    for k, wnid in reversed(list(enumerate(sorted(IMAGENETTE)))):
        grey = Image.new("RGB", (8, 8), (10 + 20 * k,) * 3)
        for split, names in (("train", [f"{wnid}_{k + 1}.JPEG", f"{wnid}_{k + 2}.png"]),
                             ("val", [f"ILSVRC2012_val_{k + 1:08d}.JPEG"])):
            (root / split / wnid).mkdir(parents=True)
            for name in names:
                grey.save(root / split / wnid / name, quality=95)
    (root / "noisy_imagenette.csv").write_text("path,noisy_labels_0,is_valid\n")
    return root


def test_an_imagenette_download_needs_no_build_the_imagenet_reader_reads_it(tmp_path, monkeypatch):
    import numpy as np

    from skipless.config import load_config

    root = _write_fake_imagenette(tmp_path / "imagenette2")
    monkeypatch.setenv("IMAGENET10_ROOT", str(root))
    cfg = load_config("train", ["data=imagenet10"])  # make train DATA=imagenet10 IMAGENET10_ROOT=<imagenette2>
    wnids = subset_wnids("imagenet10")
    assert list(wnids) == sorted(wnids)  # imagenet10.txt's order is the reader's, ImageFolder's sorted wnids
    for split, per_class in (("train", 2), ("val", 1)):
        data = classification_split(cfg.data.name, cfg.data.root, split)
        assert data.class_names == wnids and len(data) == 10 * per_class
        assert np.bincount(data.labels).tolist() == [per_class] * 10
        for i in range(len(data)):
            image, label = data.read(i)
            assert Path(data.items[i]).parent.name == wnids[label]
            assert abs(int(np.asarray(image)[4, 4, 0]) - (10 + 20 * label)) <= 3  # the class's own grey
