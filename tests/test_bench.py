"""bench/: the table writer, and the TokenCut solver benchmark on a tiny generated set (speed is never asserted)."""
import json
import pytest
import torch

from bench.table import markdown_table
from bench.tokencut_solvers import bench_tokencut
from skipless.data.generator.synthetic import generate
from skipless.models import create_vit, save_backbone


def test_one_table_writer_formats_every_section_alike():
    table = markdown_table([{"a": 1.23456, "b": None}, {"a": "x|y"}], ["a", "b"])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1.23 | - |", "| x\\|y | - |"]


def test_tokencut_solvers_agree_where_the_ncut_vector_is_unique(tmp_path):
    data = generate(tmp_path / "data", n_train=1, n_val=2, seed=3, workers=1)
    torch.manual_seed(0)
    save_backbone(tmp_path / "runs" / "tiny" / "backbone.pt", create_vit("vit_tiny", residual="skipless", depth=2))
    r = bench_tokencut(str(tmp_path / "runs" / "tiny"), root=str(data), n_images=2, device="cpu")
    assert r["images"] == 2 and r["blocks"] == 2 and r["graphs"] == 4
    assert set(r["median_seconds_per_image"]) == {"torch_float64", "torch_float32", "lapack_float64", "scipy_dense",
                                                  "scipy_subset"}
    assert r["identical_boxes_where_unique"]["lapack_float64"] in (None, pytest.approx(1.0))


def test_conditioning_bench_compares_the_matrix_free_kappa_with_the_dense_one():
    from bench.conditioning import dense_vs_free

    r = dense_vs_free()
    assert r["shape_of_J"][0] == 2 * 5 * 48
    assert r["largest_rel_gap"] < 1e-2 and r["smallest_rel_gap"] < 1e-2
    assert r["kappa_matrix_free"] == pytest.approx(r["kappa_dense"], rel=2e-2)


def assert_utilisation_of_this_device(row: dict) -> None:
    """A step row's MFU on the machine the test runs on: none on a CPU (no peak to divide by); on a GPU the
    model TFLOP/s over the peak the bench reads from the device's name, or none for a GPU it does not know."""
    from skipless.flops import gpu_peak

    peak = gpu_peak()[1]
    assert row["peak_tflops"] == peak
    assert row["mfu"] == (None if peak is None else pytest.approx(row["model_tflops_per_s"] / peak))


def test_supervised_step_bench_reports_a_consistent_row_and_the_ratios():
    from bench.pretrain_step import with_ratios
    from bench.train_step import bench_train_step

    tiny = ["model.arch=vit_tiny", "model.depth=1", "aug.image_size=32", "train.batch_size_per_device=4"]
    rows = with_ratios([bench_train_step(m, o, tiny, steps=2, warmup=1) for m in ("skip", "skipless")
                        for o in ("adamw", "soap")])
    by = {(r["model"], r["optim"]): r for r in rows}
    for r in rows:
        assert r["batch"] == 4 and r["image_px"] == 32 and r["step_s"] >= r["fastest_step_s"] > 0
        assert r["images_per_s"] == pytest.approx(4 / r["step_s"])
        assert r["model_tflops_per_s"] == pytest.approx(r["gflop_per_image"] * 4 / r["step_s"] / 1e3)
        assert r["gflop_per_image"] > 0
        assert_utilisation_of_this_device(r)
    assert by[("skip", "soap")]["soap_over_adamw"] == pytest.approx(by[("skip", "soap")]["step_s"]
                                                                     / by[("skip", "adamw")]["step_s"])
    assert by[("skip", "adamw")]["skipless_over_skip"] == pytest.approx(by[("skipless", "adamw")]["step_s"]
                                                                        / by[("skip", "adamw")]["step_s"])


MAE_TINY = ["model.arch=vit_tiny", "model.depth=2", "model.img_size=32", "mae.input_size=32", "mae.decoder.dim=32",
            "mae.decoder.depth=2", "mae.decoder.heads=2", "train.batch_size_per_device=4"]
DINO_TINY = ["model.depth=2", "dino.local_crop_size=16", "dino.local_crops_number=2", "dino.out_dim=64",
             "dino.hidden_dim=32", "dino.bottleneck_dim=16", "train.batch_size_per_device=2"]


def test_mae_step_bench_reports_each_encoder_the_skips_and_dino_with_their_ratios():
    from bench.mae_step import COLUMNS, section_mae

    rows, text = section_mae(True, sizes=[MAE_TINY], dino_sizes=DINO_TINY, steps=2, warmup=1)
    assert [(r["method"], r["model"], r["unet_skips"]) for r in rows] == [
        ("mae", "skip", True), ("mae", "decayed", True), ("mae", "decayed", False), ("dino", "skip", None)]
    skip, decayed, bare, dino = rows
    for r in rows:
        assert set(COLUMNS) <= set(r) and r["arch"] == "vit_tiny" and r["step_s"] >= r["fastest_step_s"] > 0
        assert r["images_per_s"] == pytest.approx(r["batch"] / r["step_s"])
        assert r["model_tflops_per_s"] == pytest.approx(r["gflop_per_image"] * r["batch"] / r["step_s"] / 1e3)
        assert r["gflop_per_image"] > 0
        assert_utilisation_of_this_device(r)
        assert (r["peak_memory_mb"] > 0) if torch.cuda.is_available() else (r["peak_memory_mb"] is None)
    assert [r["batch"] for r in rows] == [4, 4, 4, 2] and dino["views"] == "2x32 + 2x16"  # globals at MAE's 32 px
    assert skip["decoder"] == "2x32" and skip["views"] == "1x32, mask 0.75"
    assert skip["gflop_per_image"] == decayed["gflop_per_image"] > bare["gflop_per_image"]  # the skips' projections
    assert skip["decayed_over_skip"] == decayed["decayed_over_skip"] == pytest.approx(
        decayed["step_s"] / skip["step_s"])
    assert decayed["skips_over_none"] == bare["skips_over_none"] == pytest.approx(decayed["step_s"] / bare["step_s"])
    assert skip["mae_over_dino"] == dino["mae_over_dino"] == pytest.approx(
        skip["images_per_s"] / dino["images_per_s"])
    assert "mae_over_dino" in text and (("none on a CPU" in text) != torch.cuda.is_available())


@pytest.mark.parametrize("gpu", [True, False])
def test_mae_step_bench_sizes_are_the_seeds_on_a_gpu_and_the_demos_on_a_cpu(gpu):
    from bench.mae_step import MAE_CPU_SIZES, MAE_GPU_SIZES, dino_overrides, mae_config
    from bench.pretrain_step import DINO_CPU_SIZES, DINO_GPU_SIZES
    from skipless.config import load_config

    sizes, dino_sizes = (MAE_GPU_SIZES, DINO_GPU_SIZES) if gpu else (MAE_CPU_SIZES, DINO_CPU_SIZES)
    archs = []
    for overrides in sizes:
        cfg = mae_config("decayed", overrides)
        m = cfg.mae
        archs.append(cfg.model.arch)
        assert cfg.model.patch_size == 16 and m.unet_skips and m.mask_ratio == 0.75
        expected = (224, 128, (8, 512, 16)) if gpu else (96, 64, (4, 128, 4))  # mae-paper / mae-demo
        assert (m.input_size, cfg.train.batch_size_per_device, (m.decoder.depth, m.decoder.dim, m.decoder.heads)) \
            == expected
        dino = load_config("pretrain", ["model=skip", *dino_overrides(cfg, dino_sizes)])
        assert dino.ssl == "dino" and dino.model.arch == cfg.model.arch
        assert dino.dino.global_crop_size == m.input_size and dino.model.patch_size == 16
    assert archs == (["vit_base", "vit_small"] if gpu else ["vit_tiny"])


# ---- FLOPs and the GPU peak (skipless/flops.py) ------------------------------------------------------------------
def analytic_block(n: int, d: int) -> int:
    """Matrix-product FLOPs of one pre-norm transformer block (MLP ratio 4) on ``n`` tokens of width ``d``:
    qkv, scores, attention x values, projection, MLP."""
    return 2 * n * d * 3 * d + 2 * n * n * d + 2 * n * n * d + 2 * n * d * d + 2 * 2 * n * d * 4 * d


def analytic_vit_forward(image: int, patch: int, d: int, depth: int) -> int:
    """Matrix-product FLOPs of a ViT forward on one image, written from the architecture (CLS token,
    MLP ratio 4): patch embedding, then the blocks on CLS and every patch."""
    patches = (image // patch) ** 2
    return 2 * patches * 3 * patch * patch * d + depth * analytic_block(patches + 1, d)


def test_forward_flops_count_the_attention_products_as_the_analytic_vit_count():
    from skipless.flops import forward_flops

    model = create_vit("vit_tiny", residual="skip", depth=2, img_size=32, patch_size=8)
    assert forward_flops(model, torch.zeros(1, 3, 32, 32)) == analytic_vit_forward(32, 8, 192, 2)
    assert model.training and not any(getattr(m, "explicit", False) for m in model.modules())  # restored


def test_dino_step_flops_are_three_student_forwards_and_a_teacher_forward_heads_included():
    from skipless.flops import dino_step_flops
    from skipless.config import load_config

    cfg = load_config("pretrain", ["model=skipless", "model.arch=vit_tiny", "model.depth=1", "dino.global_crop_size=32",
                                   "dino.local_crop_size=16", "dino.local_crops_number=2", "dino.out_dim=64",
                                   "dino.hidden_dim=32", "dino.bottleneck_dim=16"])
    d, h, b, out = 192, 32, 16, 64
    head = 2 * (d * h + h * h + h * b + b * out)  # MLP to the bottleneck, then the last layer, per crop
    big, small = analytic_vit_forward(32, 16, d, 1), analytic_vit_forward(16, 16, d, 1)
    student, teacher = 2 * big + 2 * small + 4 * head, 2 * big + 2 * head
    assert dino_step_flops(cfg) == 3 * student + teacher


def test_supervised_step_flops_are_three_forwards_of_backbone_and_classifier():
    from skipless.flops import supervised_step_flops
    from skipless.config import load_config

    cfg = load_config("train", ["model=skip", "model.arch=vit_tiny", "model.depth=1", "aug.image_size=32"])
    assert supervised_step_flops(cfg, 10) == 3 * (analytic_vit_forward(32, 16, 192, 1) + 2 * 192 * 10)


@pytest.mark.parametrize("unet_skips", [True, False])
def test_mae_step_flops_are_three_forwards_of_the_visible_encoder_the_full_decoder_and_the_skips(unet_skips):
    from skipless.flops import mae_step_flops
    from skipless.config import load_config

    cfg = load_config("pretrain", ["ssl=mae", "model=decayed", "model.arch=vit_tiny", "model.depth=4",
                                   "model.patch_size=8", "model.img_size=32", "mae.input_size=32",
                                   "mae.decoder.dim=32", "mae.decoder.depth=2", "mae.decoder.heads=2",
                                   f"mae.unet_skips={unet_skips}"])
    d, dec, p, n = 192, 32, 8, 16                 # encoder width, decoder width, patch, patches (4 x 4)
    visible, everything = 1 + 4, 1 + n           # CLS + int(16 x 0.25) visible; CLS + all 16 positions
    encoder = 2 * n * 3 * p * p * d + 4 * analytic_block(visible, d)  # the patch embedding sees all 16
    decoder = 2 * visible * d * dec + 2 * analytic_block(everything, dec) + 2 * everything * dec * 3 * p * p
    # mirror pairs of a 4-block encoder and 2-block decoder: blocks 1 -> 1 and 3 -> 0; each skip projects
    # its tap (CLS + visible) to the decoder's width and fuses [stream, skip] (2 x 32 -> 32) on all positions
    skips = 2 * (2 * visible * d * dec + 2 * everything * 2 * dec * dec) if unet_skips else 0
    assert mae_step_flops(cfg) == 3 * (encoder + decoder + skips)


@pytest.mark.parametrize("name,peak", [
    ("NVIDIA H100 80GB HBM3", 989.5), ("NVIDIA H100 SXM5 80GB", 989.5), ("NVIDIA H100 PCIe", 756.5),
    ("NVIDIA H100 NVL", 835.5), ("NVIDIA H200", 989.5), ("NVIDIA H200 NVL", 835.5), ("NVIDIA GH200 480GB", 989.5),
    ("NVIDIA A100-SXM4-80GB", 312.0), ("NVIDIA A100 80GB PCIe", 312.0),
    ("NVIDIA GeForce RTX 4090", None), ("NVIDIA H100", None), ("Tesla V100-SXM2-16GB", None)])
def test_the_gpu_peak_is_chosen_by_the_device_name(monkeypatch, name, peak):
    from skipless.flops import gpu_peak, mfu_note, utilisation

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert gpu_peak() == (name, peak)
    row = utilisation(int(2e12), batch=4, step_s=0.5)  # 16 TFLOP/s
    assert row["model_tflops_per_s"] == pytest.approx(16.0) and row["peak_tflops"] == peak
    assert row["mfu"] == (None if peak is None else pytest.approx(16.0 / peak))
    note = mfu_note()
    assert name in note and (("not known" in note) if peak is None else (f"{peak:g}" in note))


def test_no_mfu_on_a_cpu(monkeypatch):
    from skipless.flops import gpu_peak, mfu_note

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_peak() == (None, None) and "CPU" in mfu_note()


def test_variants_bench_times_each_variant_against_softmax_and_the_graying_alone():
    from bench.attention_variants import section_variants

    variants = {"softmax": [], "linear": ["model.attention=linear"], "dct": ["model.token_graying.method=dct"]}
    tiny = ["model.arch=vit_tiny", "model.depth=1", "aug.image_size=32", "train.batch_size_per_device=4"]
    result, text = section_variants(True, variants=variants, overrides=tiny, steps=2, warmup=1)
    rows = result["steps"]
    assert [r["variant"] for r in rows] == list(variants) and rows[0]["over_softmax"] == 1.0
    for r in rows:
        assert r["batch"] == 4 and r["image_px"] == 32 and r["step_s"] > 0
        assert r["over_softmax"] == pytest.approx(r["step_s"] / rows[0]["step_s"])
    assert [(r["method"], r["batch"], r["image_px"]) for r in result["graying_alone"]] == [("svd", 4, 32), ("dct", 4, 32)]
    assert all(r["seconds"] > 0 for r in result["graying_alone"]) and "over_softmax" in text


# ---- the official DINO step side by side, against a fake checkout written here -----------------------------
# CI has no facebookresearch/dino checkout: these small modules expose the names the bench calls, and log
# each call to a file, so the tests check the glue (which functions it calls, how often, what it reports).
FAKE_VISION_TRANSFORMER = '''
import torch
from torch import nn
import utils


class VisionTransformer(nn.Module):
    def __init__(self, patch_size=16, embed_dim=8, depth=1, num_heads=1, drop_path_rate=0.0, **kwargs):
        super().__init__()
        self.embed_dim = embed_dim
        self.proj = nn.Linear(3, embed_dim)

    def forward(self, x):
        utils.log("backbone")
        return self.proj(x.mean(dim=(2, 3)))


def vit_small(**kwargs):
    return VisionTransformer(**kwargs)


class DINOHead(nn.Module):
    def __init__(self, in_dim, out_dim, use_bn=False, norm_last_layer=True, nlayers=3, hidden_dim=16,
                 bottleneck_dim=8):
        super().__init__()
        self.mlp = nn.Linear(in_dim, bottleneck_dim)
        self.last_layer = nn.Linear(bottleneck_dim, out_dim, bias=False)

    def forward(self, x):
        return self.last_layer(self.mlp(x))
'''
FAKE_UTILS = '''
import numpy as np
import torch
from torch import nn

LOG = {log!r}


def log(what):
    with open(LOG, "a") as f:
        f.write(what + "\\n")


class MultiCropWrapper(nn.Module):
    def __init__(self, backbone, head):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, x):
        return self.head(torch.cat([self.backbone(c) for c in x]))


def get_params_groups(model):
    log("get_params_groups")
    ps = [p for p in model.parameters() if p.requires_grad]
    return [{{"params": [p for p in ps if p.ndim > 1]}}, {{"params": [p for p in ps if p.ndim == 1], "weight_decay": 0.0}}]


def cosine_scheduler(base_value, final_value, epochs, niter_per_ep, warmup_epochs=0, start_warmup_value=0):
    return np.full(epochs * niter_per_ep, float(base_value))


def clip_gradients(model, clip):
    log("clip_gradients")
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def cancel_gradients_last_layer(epoch, model, freeze_last_layer):
    log("cancel_gradients_last_layer")


class MetricLogger:
    def __init__(self, delimiter="\\t"):
        pass

    def update(self, **kwargs):
        log("metric " + ",".join(kwargs))
'''
FAKE_MAIN_DINO = '''
import torch
import torch.distributed as dist
from torch import nn

import utils
from vision_transformer import DINOHead


class DINOLoss(nn.Module):
    def __init__(self, out_dim, ncrops, warmup_teacher_temp, teacher_temp, warmup_teacher_temp_epochs, nepochs):
        super().__init__()
        self.ncrops = ncrops

    def forward(self, student_output, teacher_output, epoch):
        utils.log("loss")
        assert student_output.shape[0] == self.ncrops * teacher_output.shape[0] // 2
        dist.all_reduce(teacher_output.sum(0))  # as DINO's update_center: needs a process group
        return (student_output.mean() - teacher_output.mean().detach()) ** 2 + student_output.pow(2).mean()
'''
TINY = dict(batch=2, global_size=32, local_size=16, n_local=2, out_dim=64, depth=1)


def fake_dino(root, log):
    root.mkdir(parents=True, exist_ok=True)
    (root / "vision_transformer.py").write_text(FAKE_VISION_TRANSFORMER)
    (root / "utils.py").write_text(FAKE_UTILS.format(log=str(log)))
    (root / "main_dino.py").write_text(FAKE_MAIN_DINO)
    return root


def test_official_side_by_side_alternates_both_steps_and_reports_the_ratio(tmp_path, monkeypatch):
    import sys

    from bench.side_by_side import COLUMNS, section_official, sizes
    from skipless.ssl.dino.module import DINO

    log = tmp_path / "calls.log"
    repo = fake_dino(tmp_path / "dino", log)
    ours_calls = []
    step = DINO.training_step
    monkeypatch.setattr(DINO, "training_step", lambda self, *a: ours_calls.append(1) or step(self, *a))
    utils_before = sys.modules.get("utils")
    rows, text = section_official(str(repo), configs=[("skip", "adamw")], size=sizes(**TINY), steps=2, warmup=1,
                                  compiled=(False,), precisions=("32-true",))

    calls = log.read_text().splitlines()
    assert calls.count("loss") == 3 and calls.count("clip_gradients") == 3  # warm-up + 2 official steps
    assert calls.count("cancel_gradients_last_layer") == 3 and calls.count("get_params_groups") == 1
    assert calls.count("backbone") == 3 * (2 + 4)  # per crop (the fake): teacher on 2 globals, student on all 4
    assert calls.count("metric loss") == 3
    assert len(ours_calls) == 3
    (row,) = rows
    assert set(COLUMNS) <= set(row)
    assert row["model"] == "skip" and row["optim"] == "adamw" and row["batch"] == 2 and row["crops"] == "2x32 + 2x16"
    assert row["compile"] is False and row["precision"] == row["official_precision"] == "32-true"
    assert row["official_steps"] == 2 and row["ours_steps"] == 2
    assert row["official_step_s"] > 0 and row["ours_step_s"] > 0
    assert row["official_over_ours"] == pytest.approx(row["official_step_s"] / row["ours_step_s"])
    assert row["ours_images_per_s"] == pytest.approx(2 / row["ours_step_s"])
    assert "official_over_ours" in text.splitlines()[-3]
    assert sys.modules.get("utils") is utils_before and "main_dino" not in sys.modules  # DINO's names let go
    import torch.distributed as dist
    assert not dist.is_initialized()  # the section's world-size-1 group is closed again


@pytest.mark.parametrize("native_bf16", [True, False])
def test_official_section_adds_our_bf16_row_where_the_cpu_has_native_bf16(tmp_path, monkeypatch, native_bf16):
    import bench.side_by_side as side
    from skipless.ssl.dino.module import DINO

    monkeypatch.setattr(side, "cpu_has_native_bf16", lambda: native_bf16)
    ran_in = []
    step = DINO.training_step
    monkeypatch.setattr(DINO, "training_step", lambda self, *a: ran_in.append(self.trainer.precision) or step(self, *a))
    rows, text = side.section_official(str(fake_dino(tmp_path / "dino", tmp_path / "calls.log")),
                                       configs=[("skip", "adamw")], size=side.sizes(**TINY), steps=1, warmup=1,
                                       compiled=(False,))
    expected = ["32-true", "bf16-mixed"] if native_bf16 else ["32-true"]
    assert [r["precision"] for r in rows] == expected and all(r["official_precision"] == "32-true" for r in rows)
    assert ran_in == [p for p in expected for _ in range(2)]  # our side really trained in that precision
    assert "no CPU bf16 path" in text
    assert ("no native bf16" in text.splitlines()[-1]) is not native_bf16


def test_optimizer_bench_times_every_implementation_of_both_optimizers():
    from bench.optimizer_step import COLUMNS, section_optim
    from skipless.optim import IMPLEMENTATIONS

    rows, text = section_optim(arch="vit_tiny", out_dim=64, steps=2,
                               overrides=["model.depth=1", "dino.hidden_dim=32", "dino.bottleneck_dim=16"])
    assert [(r["optim"], r["implementation"]) for r in rows] == [
        (o, i) for o, impls in IMPLEMENTATIONS.items() for i in impls]
    assert all(set(COLUMNS) <= set(r) and len(r["times_s"]) == 2 and r["step_ms"] > 0 for r in rows)
    assert min(r["over_fastest_adamw"] for r in rows if r["optim"] == "adamw") == 1.0
    assert len({r["params_m"] for r in rows}) == 1
    assert text.splitlines()[-len(rows) - 2].startswith("| optim | implementation")


def test_natural_jpegs_are_deterministic_of_the_asked_size_and_have_a_one_over_f_spectrum(tmp_path):
    import numpy as np
    from PIL import Image

    from bench.natural_images import SIZES, amplitude_slope, ensure_natural_jpegs, natural_image

    image = natural_image(3, 5, (96, 64))
    assert image.size == (96, 64) and image.mode == "RGB"
    assert np.array_equal(np.asarray(image), np.asarray(natural_image(3, 5, (96, 64))))
    assert not np.array_equal(np.asarray(image), np.asarray(natural_image(3, 6, (96, 64))))
    assert natural_image(0, 0).size in [size for size, _ in SIZES]  # drawn from ImageNet's common sizes

    paths = ensure_natural_jpegs(tmp_path / "a", 2, seed=1, size=(96, 64))
    assert [p.name for p in paths] == ["00000.jpg", "00001.jpg"]
    first = paths[0].read_bytes()
    more = ensure_natural_jpegs(tmp_path / "a", 3, seed=1, size=(96, 64))  # adds one file, keeps the others
    assert more[:2] == paths and paths[0].read_bytes() == first and len(list(more[0].parent.iterdir())) == 3
    assert ensure_natural_jpegs(tmp_path / "b", 1, seed=1, size=(96, 64))[0].read_bytes() == first  # from the seed
    assert Image.open(paths[0]).size == (96, 64)

    # The amplitude spectrum falls as 1/f (log-log slope near -1; natural images: about -0.8 to -1.5),
    # also after the JPEG round trip; white noise, the check's control, is flat.
    assert -1.5 < amplitude_slope(natural_image(0, 1, (256, 192))) < -0.7
    assert -1.5 < amplitude_slope(Image.open(ensure_natural_jpegs(tmp_path / "c", 1, size=(256, 192))[0])) < -0.7
    noise = Image.fromarray(np.random.default_rng(0).integers(0, 256, (192, 256, 3), dtype=np.uint8))
    assert abs(amplitude_slope(noise)) < 0.2


LOADER_SIZES = ["train.batch_size_per_device=2", "dino.global_crop_size=32", "dino.local_crop_size=16",
                "dino.local_crops_number=2"]


def test_loader_bench_reports_each_pipeline_the_breakdown_and_each_worker_count_without_an_official_checkout(
        tmp_path, monkeypatch):
    from bench.loader_throughput import BREAKDOWN_COLUMNS, PIPELINE_COLUMNS, STAGES, WORKER_COLUMNS, section_loader

    monkeypatch.delenv("DINO_REPO", raising=False)
    threads = torch.get_num_threads()
    r, text = section_loader(demand=10.0, cache=tmp_path, images=2, warmup=1, batches=1, workers=[0, 1],
                             image_size=(64, 48), overrides=LOADER_SIZES)
    assert torch.get_num_threads() == threads  # one thread while measuring, the caller's afterwards
    assert r["images"]["count"] == 3 and r["images"]["sizes"] == {"64x48": 3} and r["threads"] == 1
    assert [row["pipeline"] for row in r["pipelines"]] == ["decode", "dino", "dino colour on device",
                                                           "dino crops on device", "mae", "supervised"]
    for row in r["pipelines"]:
        assert set(PIPELINE_COLUMNS) <= set(row) and row["images"] == 2 and row["cpu_ms_per_image"] > 0
    assert [row["views"] for row in r["pipelines"][1:]] == ["2x32 + 2x16"] * 3 + ["1x224", "1x224"]
    assert r["device_part"]["batch"] == 64 and r["device_part"]["cuts_ms"] > 0 and r["device_part"]["colour_ms"] > 0
    assert r["cpu_ms_per_image"] == {row["pipeline"]: row["cpu_ms_per_image"] for row in r["pipelines"]}
    assert r["official_cpu_ms_per_image"] is None and r["official_wall_ms_per_image"] is None
    assert "DINO_REPO is not set" in r["official_note"] and "official_cpu_ms_per_image is null" in r["official_note"]
    assert [line for line in text.splitlines() if "DataAugmentationDINO" in line] == [r["official_note"]]

    b = r["dino_breakdown"]
    assert all(set(BREAKDOWN_COLUMNS) <= set(row) for row in b["ops"])
    assert {row["op"] for row in b["ops"]} >= {"decode_rgb", "RandomResizedCrop", "ColorJitter", "RandomGaussianBlur",
                                               "ToTensor", "Normalize"}
    assert "other" not in {row["stage"] for row in b["ops"]}  # every transform of the multi-crop has its stage
    assert list(b["stages_ms_per_image"]) == list(STAGES.values())
    assert sum(b["stages_ms_per_image"].values()) == pytest.approx(b["total_ms_per_image"])
    assert sum(row["share"] for row in b["ops"]) == pytest.approx(1.0)
    assert r["draft"]["scale"] == 2 and r["draft"]["images"] == 2 and 0 <= r["draft"]["upsampled_share_draft"] <= 1

    assert [(w["augment_on"], w["num_workers"]) for w in r["workers"]] == [
        (path, n) for path in ("workers", "device", "device_crops") for n in (0, 1)]
    part = r["device_part"]
    assert part["device"] == "cpu" and part["device_ms_per_image"] == {
        "workers": 0.0, "device": part["colour_ms"] / 64, "device_crops": (part["cuts_ms"] + part["colour_ms"]) / 64}
    for w in r["workers"]:
        assert set(WORKER_COLUMNS) <= set(w) and w["batches"] == 1 and w["crops"] == "2x32 + 2x16" and w["batch"] == 2
        # the step's 10 images/s, with the device's ms per image added to each image on the device paths
        demand = 1 / (1 / 10.0 + part["device_ms_per_image"][w["augment_on"]] / 1000)
        assert w["demand_images_per_s"] == pytest.approx(demand)
        assert w["images_per_s"] > 0 and w["loader_over_demand"] == pytest.approx(w["images_per_s"] / demand)
    assert r["workers"][0]["demand_images_per_s"] == 10.0 and r["workers"][-1]["demand_images_per_s"] < 10.0
    json.dumps(r)  # what bench/results.json stores


FAKE_AUGMENTATION = '''
from torchvision import transforms

LOG = {log!r}


class DataAugmentationDINO:
    def __init__(self, global_crops_scale, local_crops_scale, local_crops_number):
        with open(LOG, "a") as f:
            f.write(f"init {{global_crops_scale}} {{local_crops_scale}} {{local_crops_number}}\\n")
        self.n, self.to_tensor = local_crops_number, transforms.ToTensor()

    def __call__(self, image):
        with open(LOG, "a") as f:
            f.write(f"call {{image.size}}\\n")
        return [self.to_tensor(image)] * (2 + self.n)
'''


def test_loader_bench_times_the_official_augmentation_of_a_given_checkout(tmp_path, monkeypatch):
    import sys

    from bench.loader_throughput import section_loader

    monkeypatch.delenv("DINO_REPO", raising=False)
    repo, log = tmp_path / "dino", tmp_path / "calls.log"
    repo.mkdir()
    (repo / "utils.py").write_text("")
    (repo / "vision_transformer.py").write_text("")
    (repo / "main_dino.py").write_text(FAKE_AUGMENTATION.format(log=str(log)))
    r, text = section_loader(dino_repo=str(repo), cache=tmp_path / "cache", images=2, warmup=1, batches=1,
                             workers=[0], image_size=(64, 48), overrides=LOADER_SIZES)
    assert log.read_text().splitlines() == ["init (0.4, 1.0) (0.05, 0.4) 2"] + ["call (64, 48)"] * 3  # warm-up + 2
    official = r["pipelines"][-1]
    assert official["pipeline"] == "official dino" and official["views"] == "2x224 + 2x96"
    assert r["official_cpu_ms_per_image"] == official["cpu_ms_per_image"] > 0
    assert official["official_over_ours"] == pytest.approx(official["cpu_ms_per_image"] / r["cpu_ms_per_image"]["dino"])
    assert "official dino" not in r["cpu_ms_per_image"] and str(repo) in r["official_note"]
    assert "official_over_ours" in text and "main_dino" not in sys.modules  # DINO's module names let go


def test_compile_bench_times_eager_and_both_compiled_ways():
    from bench.compile_step import COLUMNS, WAYS, section_compile

    rows, text = section_compile(arch="vit_tiny", size=32, batch=2, steps=1, depth=2)
    assert [r["way"] for r in rows] == list(WAYS) and rows[0]["over_eager"] == 1.0
    assert all(set(COLUMNS) <= set(r) and r["step_s"] > 0 for r in rows)
    assert rows[0]["graphs"] == 0 and rows[2]["graphs"] == 1  # eager: none; whole: one graph
    assert rows[1]["graphs"] == 2  # one per block: their drop-path rates differ
    assert "over_eager" in text


def test_osa_bench_reports_every_way_per_size_and_stops_the_dense_side_at_its_cap():
    from bench.osa_cost import BLOCK_COLUMNS, COLUMNS, WAYS, section_osa

    r, text = section_osa(True, sizes=(16, 48), dv=8, cap_s=0.0, repeats=1, block_arch="vit_tiny", block_side=2,
                          block_batch=2, ns_models=[("vit_micro", 28, {"patch_size": 4, "depth": 1})])
    rows = r["head"]
    assert [(row["N"], row["way"]) for row in rows] == [(n, w) for n in (16, 48) for w in WAYS]
    dense16, dense48 = rows[2], rows[5]
    assert dense16["forward_ms"] > 0 and "above the 0 s cap" in dense16["note"]  # measured once, then stopped
    assert dense48["forward_ms"] is None and dense48["peak_mb"] is None and "not run" in dense48["note"]
    for row in rows:
        assert set(COLUMNS) <= set(row)
        if row["forward_ms"] is not None:
            qr = next(q for q in rows if q["N"] == row["N"] and q["way"] == "low-rank qr")
            assert row["forward_ms"] > 0 and row["peak_mb"] >= 0
            assert row["over_qr"] == pytest.approx(row["forward_ms"] / qr["forward_ms"])
    blocks = r["block"]
    assert len(blocks) == 3 and blocks[0]["forward_over_softmax"] == 1.0 and blocks[0]["tokens"] == 5
    assert all(set(BLOCK_COLUMNS) <= set(b) for b in blocks)
    assert blocks[1]["forward_backward_over_softmax"] == pytest.approx(
        blocks[1]["forward_backward_ms"] / blocks[0]["forward_backward_ms"])
    (ns,) = r["newton_schulz"]
    assert ns["tokens"] == 50 and ns["d_v"] == 16 and list(ns["errors"]) == list(range(1, 11))
    assert all(0 <= e <= 2 for e in ns["errors"].values()) and ns["errors"][10] < ns["errors"][1]
    assert text.count("| N | way |") == 1 and "| model | K=1 |" in text


def test_our_side_runs_the_speed_keys_at_their_defaults_and_compiles_when_asked():
    from bench.side_by_side import our_config, sizes
    from skipless.config import load_config

    default = load_config("pretrain", ["optim=soap"])
    for compiled in (False, True):
        cfg = our_config("skipless", "soap", sizes(**TINY), compiled)
        assert cfg.train.compile is compiled and cfg.optim.implementation == default.optim.implementation
        assert cfg.train.batch_size_per_device == 2 and cfg.dino.out_dim == 64 and cfg.model.depth == 1


def test_official_side_by_side_is_one_line_without_a_complete_checkout(tmp_path, monkeypatch):
    from bench.side_by_side import section_official

    monkeypatch.delenv("DINO_REPO", raising=False)
    rows, text = section_official()
    assert rows is None and len(text.splitlines()) == 1 and "skipped" in text and "DINO_REPO" in text
    (tmp_path / "utils.py").write_text("")
    monkeypatch.setenv("DINO_REPO", str(tmp_path))
    rows, text = section_official()
    assert rows is None and len(text.splitlines()) == 1
    assert "lacks vision_transformer.py, main_dino.py" in text


def test_profile_of_our_step_accounts_for_the_whole_step():
    from bench.profile_step import CATEGORIES, section_profile
    from bench.side_by_side import sizes

    r, text = section_profile(size=sizes(**TINY), steps=2, warmup=1)
    assert list(r["share"]) == list(CATEGORIES) and r["step_s"] > 0
    assert all(share >= 0 for share in r["share"].values())
    assert sum(r["share"].values()) == pytest.approx(1.0)
    assert sum(r["seconds"].values()) == pytest.approx(r["step_s"])
    for part in ("teacher backbone forward", "student backbone forward", "student head forward", "backward",
                 "optimizer step", "EMA update", "gradient clipping"):
        assert r["seconds"][part] > 0, part
    assert all(f"| {part} |" in text for part in CATEGORIES)


def test_a_run_of_some_sections_keeps_the_others_in_the_results_file(tmp_path):
    from bench.__main__ import merge_results

    out = tmp_path / "results.json"
    first = merge_results(out, {"device": "GPU", "torch": "2.x", "date": "d1", "pretrain": [1], "optim": [2]})
    out.write_text(json.dumps(first))
    second = merge_results(out, {"device": "CPU", "torch": "2.x", "date": "d2", "optim": [3]})
    assert second["pretrain"] == [1] and second["optim"] == [3] and second["device"] == "CPU"
    assert second["measured"]["pretrain"]["device"] == "GPU" and second["measured"]["optim"]["date"] == "d2"
    out.write_text("{not json")
    assert merge_results(out, {"device": "CPU", "torch": "2.x", "date": "d3", "init": {}})["init"] == {}


def test_forward_flops_counts_a_model_that_hands_a_parameter_to_a_submodule_and_leaves_it_trainable():
    """CaiT's class token goes into its class-attention blocks as an input: the counter's module tracker failed
    on it ("Expected gradient function to be set") until the parameters were frozen while counting."""
    import copy

    import timm
    from torch.utils.flop_counter import FlopCounterMode

    from skipless.flops import forward_flops

    model = timm.create_model("cait_s24_224", num_classes=0, img_size=32, embed_dim=24, depth=1, num_heads=2,
                              depth_token_only=1).train()
    x = torch.randn(1, 3, 32, 32)
    frozen = copy.deepcopy(model).eval().requires_grad_(False)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:  # an independent count
        frozen(x)
    assert forward_flops(model, x) == counter.get_total_flops() > 0
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_data_wait_splits_each_cycle_into_the_wait_the_device_augmentation_and_the_step(monkeypatch):
    """Scripted clock: each cycle's wait is the gap between steps less the transfer hook's time."""
    from bench.end_to_end import DataWait

    class Module:
        def on_after_batch_transfer(self, batch, idx):
            return batch + 1

    clock = iter([0.0, 1.0,                 # step 0 (the warm-up): start, end
                  3.0, 3.5, 4.0, 6.0,       # step 1: transfer 3.0-3.5, start 4.0, end 6.0
                  6.5, 7.5, 7.5, 8.0])      # step 2: transfer 6.5-7.5, start 7.5, end 8.0
    monkeypatch.setattr(DataWait, "_now", staticmethod(lambda: next(clock)))
    timer, module = DataWait(warmup=0), Module()
    timer.setup(None, module, "fit")
    timer.on_train_batch_start(None, module, None, 0)
    timer.on_train_batch_end(None, module, None, None, 0)
    for i in (1, 2):
        assert module.on_after_batch_transfer(i, 0) == i + 1
        timer.on_train_batch_start(None, module, None, i)
        timer.on_train_batch_end(None, module, None, None, i)
    assert timer.wait == [2.5, 0.5] and timer.augment == [0.5, 1.0] and timer.step == [2.0, 0.5]


def test_end_to_end_bench_runs_the_pretraining_per_path_and_worker_count(tmp_path):
    from bench.end_to_end import COLUMNS, section_end_to_end

    r, text = section_end_to_end(True, cache=tmp_path, workers=[0], paths=("workers", "device_crops"), steps=2,
                                 warmup=1, image_size=(64, 48))
    assert [(row["augment_on"], row["num_workers"]) for row in r["rows"]] == [("workers", 0), ("device_crops", 0)]
    for row in r["rows"]:
        assert set(COLUMNS) <= set(row) and row["steps"] == 2 and row["batch"] == 2
        cycle = row["wait_ms"] + row["augment_ms"] + row["step_ms"]
        assert row["augment_ms"] > 0 and row["step_ms"] > 0 and 0 <= row["data_wait_share"] < 1
        assert row["images_per_s"] == pytest.approx(1000 * 2 / cycle)
        assert row["data_wait_share"] == pytest.approx(row["wait_ms"] / cycle)
    assert "| device_crops | 0 | 2 | 2 |" in text


def test_pretrain_section_rows_per_batch_and_compile_setting_with_ratios_inside_each_group(monkeypatch):
    """The rows asked for, each bench step given its batch and train.compile, dynamo reset per row; the
    ratios compare rows of one batch and setting, compiled / eager the same model, optimizer and batch."""
    import bench.pretrain_step as ps

    times = {("skip", "adamw", "64", "false"): 1.0, ("skip", "soap", "64", "false"): 1.5,
             ("skip", "adamw", "64", "true"): 0.7, ("skip", "soap", "64", "true"): 0.9,
             ("skip", "adamw", "128", "false"): 2.0, ("skip", "soap", "128", "false"): 2.5,
             ("skip", "adamw", "128", "true"): 1.2, ("skip", "soap", "128", "true"): 2.0}
    resets = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1))

    def step(model, optim, overrides, steps, warmup):
        batch = [o.split("=")[1] for o in overrides if o.startswith("train.batch_size_per_device=")][-1]
        setting = [o.split("=")[1] for o in overrides if o.startswith("train.compile=")][-1]
        return {"model": model, "optim": optim, "batch": int(batch), "step_s": times[(model, optim, batch, setting)]}

    monkeypatch.setattr(ps, "bench_pretrain_step", step)
    rows = ps.section_pretrain(True, [64, 128], ["false", "true"], ["skip:adamw", "skip:soap"])
    assert [(r["batch"], r["compile"], r["optim"]) for r in rows] == [
        (b, c, o) for b in (64, 128) for c in ("false", "true") for o in ("adamw", "soap")] and len(resets) == 8
    by = {(r["batch"], r["compile"], r["optim"]): r for r in rows}
    assert by[(128, "true", "soap")]["compiled_over_eager"] == pytest.approx(2.0 / 2.5)
    assert by[(64, "true", "adamw")]["soap_over_adamw"] == pytest.approx(0.9 / 0.7)
    assert by[(64, "false", "adamw")]["compiled_over_eager"] is None
    assert by[(64, "false", "soap")]["skipless_over_skip"] is None  # no skipless row was asked for


def test_lm_init_bench_runs_quick_and_shows_uniform_skip_attention_identity_like_cutskip_and_the_head_trap():
    from bench.lm_init import CONFIGS, head_reading_at_alpha_zero, section_lm_init
    from skipless.errors import ModelArgumentError
    from skipless.models import create_causal_lm
    from skipless.models.init import query_key_matrices

    r, text = section_lm_init(True)  # lm_demo: 4 blocks of 4 heads, windows of 128 x 4 and 256 x 2
    assert r["arch"] == "lm_demo" and r["windows"] == [[128, 4], [256, 2]]
    rows = {c["name"]: c for c in r["configs"]}
    assert list(rows) == [name for name, _, _ in CONFIGS]
    for c in r["configs"]:
        assert c["depth"] == 4 and [w["length"] for w in c["windows"]] == [128, 256]
        for w in c["windows"]:
            assert len(w["blocks"]) == 4 and w["forward_s"] > 0
            assert list(w["blocks"][0]["self_weight"]) == (["2", "16", "128"] if w["length"] == 128
                                                            else ["2", "16", "128", "256"])
            assert all(-1 <= b["token_cosine"] <= 1 for b in w["blocks"])
    assert rows["cutskip head a=0*"]["distinct_heads"] == [1] * 4  # the trap: one attention map per layer
    assert all(rows[n]["distinct_heads"] == [4] * 4 for n in rows if n != "cutskip head a=0*")
    last = {n: c["windows"][1]["blocks"] for n, c in rows.items()}
    for name in ("skip fla", "skipless fla"):  # diffuse logits: the last of 256 tokens puts about 1/256 on itself
        assert all(abs(b["self_weight"]["256"] * 256 - 1) < 0.5 for b in last[name])
    assert all(b["self_weight"]["256"] * 256 > 10 for b in last["cutskip layer a=0"])  # beta I: diagonal dominance
    assert "token cosine after each block" in text and "| cutskip head a=0* | 256 |" in text
    with pytest.raises(ModelArgumentError, match="qk=head with alpha=0"):  # the bypass stays inside the bench
        create_causal_lm("lm_demo", residual="skipless", init="cutskip", init_args={"qk": "head", "alpha": 0.0})
    with head_reading_at_alpha_zero():  # inside, only that one refusal goes
        wq, wk = query_key_matrices(8, 2, 0.0, 0.5, torch.Generator(), "head")
        assert torch.equal(wq[:, :4], wq[:, 4:]) and torch.equal(wq, wk)
        with pytest.raises(ModelArgumentError, match="not a reading"):
            query_key_matrices(8, 2, 0.0, 0.5, torch.Generator(), "diagonal")
