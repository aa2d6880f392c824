"""DINO's colour augmentation batched on the device (``data.augment_on=device``, issue 48):
``skipless/data/batched_augment.py`` and its DINO composition ``MultiCropColour``.

1. Each op against torchvision's (``transforms.v2.functional``) applied image by image with the same
   parameter, on float images: exact (brightness, grayscale, normalisation, the uint8 -> float step), or to
   float rounding where the arithmetic is arranged differently (contrast and saturation 1 ulp: torchvision's
   ``add_(alpha=)``; hue 5e-6: HSV through the chroma; blur 2e-6: two 1-D passes; solarisation 1 ulp:
   ``1 - 128/255``), all far below 1/255. On 8-bit images torchvision rounds after each op, as the official
   DINO's PIL does: within 1/255 (brightness, hue: truncation), 0.5/255 (blur: rounding), 2/255 (contrast,
   saturation: the grayscale floored, then the result truncated).
2. The whole composition against torchvision's ops in ColorJitter's order, per image.
3. The draws' distributions over 20,000 draws (KS distance, chi-square of the 24 orders), at bounds a wrong
   range fails, and their probabilities per crop by counting.
4. The workers path unchanged: bit-identical crops to a copy of the transform as it was.
5. The key ``data.augment_on``; a tiny DINO training on the device path (and its exact resume); the workers
   path's losses bit-identical to those of the transform as it was.
"""
import math
from dataclasses import replace

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from PIL import Image, ImageFilter
from torchvision import transforms
from torchvision.transforms.v2 import functional as TF

from host_reads import HostReads
from skipless.config import ConfigError, load_config
from skipless.data import batched_augment as A
from skipless.data.conventions import IMAGENET_MEAN, IMAGENET_STD
from skipless.devices.world import augment_on
from skipless.pretrain import check_keys, pretrain
from skipless.ssl import METHODS
from skipless.ssl.dino import self_distillation as sd
from tiny_runs import DINO_TINY, Losses, StepsSeen, assert_steps_of_two_float_micro_batches

N = 20_000  # draws for the statistics: a proportion's standard error is at most 0.0035


def images(n=16, h=20, w=24, seed=0):
    """Random float images in [0, 1] with the awkward pixels: a grey image, a grey band, ties of max channels."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, h, w, generator=g)
    x[0] = x[0, :1]                    # grey: no hue, chroma 0
    x[1, :, :4] = 0.5                  # a grey band
    x[2, 1] = x[2, 0]                  # R == G everywhere (HSV's tie-break)
    x[3, :, :3] = torch.tensor([1.0, 0.0, 0.0]).view(3, 1, 1)  # pure red: hue 0, at the sector edge
    return x


def per_image(fn, x, params):
    return torch.stack([fn(x[i], float(params[i])) for i in range(len(params))])


def uniform(n, lo, hi, seed=1):
    return torch.rand(n, generator=torch.Generator().manual_seed(seed)) * (hi - lo) + lo


# ---- 1. each op against torchvision's ------------------------------------------------------------------

def test_brightness_and_grayscale_are_torchvisions_exactly():
    x = images()
    f = uniform(16, 0.0, 2.0)  # beyond DINO's range, so that the clamp at 1 is met
    assert torch.equal(A.adjust_brightness(x, f), per_image(TF.adjust_brightness, x, f))
    assert torch.equal(A.rgb_to_grayscale(x), TF.rgb_to_grayscale(x, num_output_channels=3))


@pytest.mark.parametrize("ours,theirs", [(A.adjust_contrast, TF.adjust_contrast),
                                         (A.adjust_saturation, TF.adjust_saturation)])
def test_contrast_and_saturation_are_torchvisions_to_one_ulp(ours, theirs):
    x = images()
    f = uniform(16, 0.0, 2.0)
    torch.testing.assert_close(ours(x, f), per_image(theirs, x, f), rtol=0, atol=1.2e-7)


def test_hue_is_torchvisions_to_float_rounding_over_every_shift():
    x = images()
    for seed in range(3):
        shift = uniform(16, -0.5, 0.5, seed)
        torch.testing.assert_close(A.adjust_hue(x, shift), per_image(TF.adjust_hue, x, shift), rtol=0, atol=5e-6)
    zero = torch.zeros(16)
    torch.testing.assert_close(A.adjust_hue(x, zero), x, rtol=0, atol=5e-6)


def test_blur_is_torchvisions_gaussian_blur_with_the_same_kernel():
    x = images(h=17, w=30)
    sigma = uniform(16, *A.BLUR_SIGMA)
    for k in (A.BLUR_KERNEL, 9, 3):
        ref = torch.stack([TF.gaussian_blur(x[i], [k, k], [float(sigma[i])] * 2) for i in range(16)])
        torch.testing.assert_close(A.gaussian_blur(x, sigma, k), ref, rtol=0, atol=2e-6)
    assert A.BLUR_KERNEL == 13 and A.blur_kernel_size(96) == 13 and A.blur_kernel_size(5) == 9


def edge_spread_variance(row: np.ndarray) -> float:
    """The variance of the line spread of a blurred vertical edge (the differences of one row)."""
    lsf = np.diff(row.astype(np.float64))
    xs = np.arange(len(lsf)) - (len(lsf) - 1) / 2
    return float((lsf * xs**2).sum() / lsf.sum())


def test_blur_kernel_spreads_edges_as_pils_blur_does():
    """Why 13 px: the official blurs with PIL's GaussianBlur(radius=sigma); at sigma 2 the 13-px sampled
    Gaussian spreads an edge as PIL's does to 2%, where DINOv2's 9-px kernel falls 13% short."""
    edge = np.zeros((32, 64), np.uint8)
    edge[:, 32:] = 255
    sigma = 2.0
    pil = edge_spread_variance(np.asarray(Image.fromarray(edge, "L").filter(ImageFilter.GaussianBlur(sigma)))[16])
    x = torch.from_numpy(edge).float().div(255).expand(1, 3, 32, 64).contiguous()

    def ours(k):
        return edge_spread_variance(A.gaussian_blur(x, torch.tensor([sigma]), k)[0, 0, 16].numpy())

    assert abs(ours(A.BLUR_KERNEL) / pil - 1) < 0.02
    assert ours(9) / pil < 0.9


def test_solarize_inverts_the_8_bit_values_pil_inverts_and_normalize_and_to_unit_are_exact():
    u = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16).expand(2, 3, 16, 16)
    ours = A.solarize(A.to_unit(u))
    assert torch.equal(ours != A.to_unit(u), u >= 128)  # the same pixels as PIL's threshold 128
    torch.testing.assert_close(ours, A.to_unit(TF.solarize(u, 128)), rtol=0, atol=6e-8)  # 1 - 128/255: 1 ulp
    pil = Image.fromarray(np.random.default_rng(0).integers(0, 256, (7, 9, 3), dtype=np.uint8))
    assert torch.equal(A.to_unit(transforms.PILToTensor()(pil)[None])[0], transforms.ToTensor()(pil))
    x = images()
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    assert torch.equal(A.normalize(x, mean, std), TF.normalize(x, IMAGENET_MEAN, IMAGENET_STD))


@pytest.mark.parametrize("ours,theirs,lo,hi,bound", [
    (A.adjust_brightness, TF.adjust_brightness, 0.6, 1.4, 1), (A.adjust_hue, TF.adjust_hue, -0.1, 0.1, 1),
    (A.adjust_contrast, TF.adjust_contrast, 0.6, 1.4, 2), (A.adjust_saturation, TF.adjust_saturation, 0.8, 1.2, 2)])
def test_on_8_bit_images_the_ops_are_within_torchvisions_rounding(ours, theirs, lo, hi, bound):
    u = torch.randint(0, 256, (32, 3, 12, 12), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    f = uniform(32, lo, hi)
    assert (ours(A.to_unit(u), f) - A.to_unit(per_image(theirs, u, f))).abs().max() < bound / 255


# ---- 2. the composition ----------------------------------------------------------------------------------

JITTER_OPS = {A.BRIGHTNESS: TF.adjust_brightness, A.CONTRAST: TF.adjust_contrast,
              A.SATURATION: TF.adjust_saturation, A.HUE: TF.adjust_hue}


def reference_colour(x: torch.Tensor, draw: A.ColourDraw, kernel: int) -> torch.Tensor:
    """DINO's colour ops with torchvision's functions, image by image, with the parameters of ``draw``."""
    out = []
    for i in range(len(draw)):
        y = x[i]
        if draw.jitter[i]:
            factors = (draw.brightness[i], draw.contrast[i], draw.saturation[i], draw.hue[i])
            for op in draw.order[i].tolist():  # ColorJitter's fn_idx
                y = JITTER_OPS[op](y, float(factors[op]))
        if draw.grayscale[i]:
            y = TF.rgb_to_grayscale(y, num_output_channels=3)
        if draw.blur[i]:
            y = TF.gaussian_blur(y, [kernel, kernel], [float(draw.sigma[i])] * 2)
        if draw.solarize[i]:
            y = TF.solarize(y, A.SOLARIZE_THRESHOLD)
        out.append(y)
    return torch.stack(out)


def test_the_batched_composition_is_torchvisions_ops_in_each_images_order():
    x = images(n=48, h=14, w=14)
    half = A.ColourRecipe(jitter_p=0.75, grayscale_p=0.3, blur_p=0.5, solarize_p=0.5)
    draw = A.draw_colour([half], 48, "cpu", torch.Generator().manual_seed(3))
    assert draw.jitter.any() and (~draw.jitter).any() and draw.solarize.any() and draw.grayscale.any()
    torch.testing.assert_close(A.apply_colour(x, draw), reference_colour(x, draw, A.BLUR_KERNEL), rtol=0, atol=2e-5)


def test_with_no_op_drawn_the_device_path_is_the_workers_to_tensor_and_normalize_exactly():
    u = torch.randint(0, 256, (8, 3, 10, 10), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    never = A.ColourRecipe(jitter_p=0.0, grayscale_p=0.0)
    colour = sd.MultiCropColour()
    draw = A.draw_colour([never], 8, "cpu")
    out = A.normalize(A.apply_colour(A.to_unit(u), draw), colour.mean, colour.std)
    workers = transforms.Compose([transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    ref = torch.stack([workers(Image.fromarray(u[i].permute(1, 2, 0).numpy())) for i in range(8)])
    assert torch.equal(out, ref)


def test_the_device_path_makes_no_host_device_synchronisation():
    crops = [torch.randint(0, 256, (4, 3, s, s), dtype=torch.uint8) for s in (32, 32, 16, 16)]
    colour = sd.MultiCropColour()  # made once, with the module
    with HostReads() as reads:
        colour(crops)
    assert reads.calls == []


# ---- 3. the draws: distributions and probabilities ---------------------------------------------------------

def ks_distance(values: torch.Tensor, lo: float, hi: float) -> float:
    """Kolmogorov-Smirnov distance between the sample and U(lo, hi)."""
    v = ((values.double().sort().values - lo) / (hi - lo)).numpy()
    n = len(v)
    return float(max((np.arange(1, n + 1) / n - v).max(), (v - np.arange(n) / n).max()))


KS_BOUND = 1.95 / math.sqrt(N)  # the KS test's critical value at level 0.001: 0.0138


@pytest.fixture(scope="module")
def draws():
    return A.draw_colour([A.ColourRecipe()], N, "cpu", torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name,lo,hi", [("brightness", 0.6, 1.4), ("contrast", 0.6, 1.4),
                                        ("saturation", 0.8, 1.2), ("hue", -0.1, 0.1), ("sigma", 0.1, 2.0)])
def test_each_factor_is_uniform_on_dinos_range(draws, name, lo, hi):
    values = getattr(draws, name)
    assert lo <= float(values.min()) and float(values.max()) <= hi
    assert ks_distance(values, lo, hi) < KS_BOUND
    # a range 10% too narrow or too wide is far outside the bound
    width = hi - lo
    assert ks_distance(values, lo - 0.05 * width, hi + 0.05 * width) > 2 * KS_BOUND
    assert ks_distance(values, lo + 0.05 * width, hi - 0.05 * width) > 2 * KS_BOUND


def test_the_24_jitter_orders_are_equally_likely(draws):
    assert torch.equal(draws.order.sort(dim=1).values, torch.arange(4).expand(N, 4))  # permutations
    code = (draws.order * torch.tensor([64, 16, 4, 1])).sum(1)
    counts = torch.bincount(code, minlength=256)
    counts = counts[counts > 0].double()
    assert len(counts) == 24
    chi2 = float(((counts - N / 24) ** 2 / (N / 24)).sum())
    assert chi2 < 49.7  # chi-square, 23 degrees of freedom, level 0.001
    # each op first a quarter of the time
    assert (torch.bincount(draws.order[:, 0], minlength=4).double() / N - 0.25).abs().max() < 0.015


def proportion_bound(p: float) -> float:
    return 5 * math.sqrt(p * (1 - p) / N) + 1e-12  # five standard errors; 0 at p 0 and 1


def test_the_default_recipe_draws_dinos_jitter_and_grayscale_probabilities(draws):
    for gate, p in (("jitter", 0.8), ("grayscale", 0.2), ("blur", 0.0), ("solarize", 0.0)):
        share = float(getattr(draws, gate).double().mean())
        assert abs(share - p) <= proportion_bound(p), (gate, share)


def test_each_crop_draws_dinos_probabilities(monkeypatch):
    """MultiCropColour's draws, recorded, counted per crop: jitter 0.8 and grayscale 0.2 everywhere, blur 1.0,
    0.1 and 0.5, solarisation 0.2 on the second global crop only."""
    recorded = []

    def recording(recipes, n, *args, **kwargs):
        recorded.append((len(recipes), n, A.draw_colour(recipes, n, *args, **kwargs)))
        return recorded[-1][2]

    monkeypatch.setattr(sd, "draw_colour", recording)
    torch.manual_seed(0)
    sd.MultiCropColour()([torch.zeros(N, 3, 2, 2, dtype=torch.uint8)] * 4)
    (globals_, n, g), (locals_, _, loc) = recorded
    assert (globals_, locals_, n) == (2, 2, N)
    crops = {"global_1": (g, slice(0, N)), "global_2": (g, slice(N, 2 * N)), "local_1": (loc, slice(0, N)),
             "local_2": (loc, slice(N, 2 * N))}
    expected = {"global_1": (1.0, 0.0), "global_2": (0.1, 0.2), "local_1": (0.5, 0.0), "local_2": (0.5, 0.0)}
    for crop, (draw, rows) in crops.items():
        blur_p, solarize_p = expected[crop]
        for gate, p in (("jitter", 0.8), ("grayscale", 0.2), ("blur", blur_p), ("solarize", solarize_p)):
            share = float(getattr(draw, gate)[rows].double().mean())
            assert abs(share - p) <= proportion_bound(p), (crop, gate, share, p)


def test_grayscale_and_solarisation_act_on_the_crops_their_draws_name():
    """Counted on the images themselves: white crops are solarised (to below 0.5) exactly when drawn, only
    the second global crop's, a fifth of them; colourful crops come out grey a fifth of the time."""
    colour = sd.MultiCropColour()
    mean, std = colour.mean, colour.std
    torch.manual_seed(0)
    white = torch.full((N, 3, 4, 4), 255, dtype=torch.uint8)
    out = [o * std + mean for o in colour([white] * 3)]
    solarised = [float((o.mean(dim=(1, 2, 3)) < 0.5).double().mean()) for o in out]
    assert solarised[0] == 0 and solarised[2] == 0 and abs(solarised[1] - 0.2) <= proportion_bound(0.2)
    rgb = torch.tensor([200, 40, 90], dtype=torch.uint8).view(1, 3, 1, 1).expand(N, 3, 4, 4)
    out = [o * std + mean for o in colour([rgb] * 3)]
    for o in out:
        grey = ((o[:, 0] - o[:, 1]).abs().amax(dim=(1, 2)) < 1e-5).double().mean()
        assert abs(float(grey) - 0.2) <= proportion_bound(0.2)


def test_each_ddp_rank_keeps_its_own_rows_of_the_global_batchs_draws():
    def draw(**kw):
        return A.draw_colour([A.ColourRecipe()] * 2, kw.pop("n"), "cpu", torch.Generator().manual_seed(5), **kw)

    whole, ranks = draw(n=8), [draw(n=4, rank=r, world=2) for r in range(2)]
    for name in ("brightness", "hue", "order", "jitter"):
        w, r0, r1 = getattr(whole, name), getattr(ranks[0], name), getattr(ranks[1], name)
        for crop in range(2):  # per crop position, rank 0 holds the first half of the global batch's rows
            assert torch.equal(w[crop * 8:crop * 8 + 4], r0[crop * 4:crop * 4 + 4])
            assert torch.equal(w[crop * 8 + 4:crop * 8 + 8], r1[crop * 4:crop * 4 + 4])


# ---- 4. the workers path as it was ------------------------------------------------------------------------

# The transform as it was before data.augment_on (commit bcd866c), copied: the workers path must stay it.
class MultiCropAsBefore:
    def __init__(self, global_crops_scale, local_crops_scale, local_crops_number, global_size, local_size):
        bicubic = transforms.InterpolationMode.BICUBIC
        flip_and_jitter = transforms.Compose([
            transforms.RandomHorizontalFlip(p=0.5),
            transforms.RandomApply([transforms.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
            transforms.RandomGrayscale(p=0.2),
        ])
        normalize = transforms.Compose([transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])

        def crop(size, scale):
            return transforms.RandomResizedCrop(size, scale=tuple(scale), interpolation=bicubic)

        self.global_1 = transforms.Compose([crop(global_size, global_crops_scale), flip_and_jitter,
                                            sd.RandomGaussianBlur(1.0), normalize])
        self.global_2 = transforms.Compose([crop(global_size, global_crops_scale), flip_and_jitter,
                                            sd.RandomGaussianBlur(0.1), transforms.RandomSolarize(128, p=0.2),
                                            normalize])
        self.local = transforms.Compose([crop(local_size, local_crops_scale), flip_and_jitter,
                                         sd.RandomGaussianBlur(0.5), normalize])
        self.local_crops_number = local_crops_number

    def __call__(self, image):
        image = image.convert("RGB")
        return [self.global_1(image), self.global_2(image)] + [self.local(image) for _ in range(self.local_crops_number)]


def test_the_workers_path_makes_the_crops_it_made_before():
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (60, 80, 3), dtype=np.uint8))
    sizes = dict(global_crops_scale=(0.4, 1.0), local_crops_scale=(0.1, 0.4), local_crops_number=2, global_size=32,
                 local_size=16)
    now, before = sd.MultiCropAugmentation(**sizes), MultiCropAsBefore(**sizes)
    for seed in range(20):
        torch.manual_seed(seed)
        a = now(image)
        torch.manual_seed(seed)
        b = before(image)
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    crops = sd.MultiCropAugmentation(**sizes, colour=False)(image)
    assert [(c.dtype, tuple(c.shape)) for c in crops] == [(torch.uint8, (3, 32, 32))] * 2 + [(torch.uint8, (3, 16, 16))] * 2


# ---- 5. the key, the device path in training, the workers path's losses -----------------------------------

def test_the_key_auto_follows_the_device_and_a_bad_value_is_one_sentence():
    assert augment_on({"data": {"augment_on": "auto"}, "train": {"accelerator": "cpu"}}) == "workers"
    assert augment_on({"data": {"augment_on": "auto"}, "train": {"accelerator": "cuda"}}) == "device"
    assert augment_on({"data": {"augment_on": "device"}, "train": {"accelerator": "cpu"}}) == "device"
    with pytest.raises(ConfigError, match=r"data.augment_on must be auto \(device on CUDA, else workers\), .*got 'gpu'"):
        check_keys(load_config("pretrain", ["data.augment_on=gpu"]))
    with pytest.raises(ConfigError, match="data.augment_on=device .* ssl=mae has none"):
        check_keys(load_config("pretrain", ["ssl=mae", "data.augment_on=device"]))
    check_keys(load_config("pretrain", ["ssl=mae", "data.augment_on=workers"]))
    image = Image.new("RGB", (40, 40), (200, 40, 90))
    for where, dtype in (("workers", torch.float32), ("device", torch.uint8)):
        crops = sd.multicrop_from_config(load_config("pretrain", [*DINO_TINY, f"data.augment_on={where}"]))(image)
        assert {c.dtype for c in crops} == {dtype}


def test_a_run_saved_before_the_key_existed_resumes_with_it(tmp_path):
    from omegaconf import OmegaConf

    from skipless.training.run_folder import resume_changes

    older = OmegaConf.to_container(load_config("pretrain"))
    del older["data"]["augment_on"]
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(older))
    assert resume_changes(load_config("pretrain"), tmp_path) == {"data.augment_on": (None, "auto")}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def tiny(tmp_path, data_root, *extra):
    return load_config("pretrain", [*DINO_TINY, f"data.root={data_root}", f"run.root={tmp_path}", *extra])


class Batches(pl.Callback):
    """The crops each training step receives."""

    def __init__(self):
        self.seen = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.seen.append([c.detach().cpu() for c in batch])


def test_a_tiny_dino_trains_on_the_device_path_with_normalised_float_crops(tmp_path, data_root):
    batches, losses = Batches(), Losses()
    pretrain(tiny(tmp_path, data_root, "data.augment_on=device"), extra_callbacks=[batches, losses])
    assert len(losses.values) == 2 and all(math.isfinite(v) for v in losses.values)
    for crops in batches.seen:
        assert [tuple(c.shape) for c in crops] == [(4, 3, 32, 32)] * 2 + [(4, 3, 16, 16)] * 2
        assert all(c.dtype == torch.float32 for c in crops)
        pixels = torch.cat([(c * torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
                             + torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)).flatten() for c in crops])
        assert -1e-5 < float(pixels.min()) and float(pixels.max()) < 1 + 1e-5  # normalised [0, 1] images
        assert float(pixels.std()) > 0.02  # pictures, not a constant


def test_with_accumulation_each_micro_batch_is_coloured_on_the_device(tmp_path, data_root):
    """train.global_batch = 2 x batch_size_per_device: the step arrives as its two micro-batches (MicroBatches),
    each coloured and normalised in on_after_batch_transfer before the step sees it."""
    seen = StepsSeen()
    pretrain(tiny(tmp_path, data_root, "data.augment_on=device", "train.global_batch=8", "data.n_train=16"),
             extra_callbacks=[seen])
    assert_steps_of_two_float_micro_batches(seen, [(4, 3, 32, 32)] * 2 + [(4, 3, 16, 16)] * 2)


def test_a_resumed_device_path_run_draws_what_an_uninterrupted_one_does(tmp_path, data_root):
    straight, first, second = Losses(), Losses(), Losses()
    pretrain(tiny(tmp_path, data_root, "data.augment_on=device", "train.epochs=2", "run.name=straight"),
             extra_callbacks=[straight])

    class StopAfterFirstEpoch(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            trainer.should_stop = True

    resumed = ["data.augment_on=device", "train.epochs=2", "run.name=resumed"]
    pretrain(tiny(tmp_path, data_root, *resumed), extra_callbacks=[first, StopAfterFirstEpoch()])
    pretrain(tiny(tmp_path, data_root, *resumed, "run.resume=true"), extra_callbacks=[second])
    assert first.values + second.values == straight.values


def as_before(cfg):
    d = cfg.dino
    return MultiCropAsBefore(d.global_crops_scale, d.local_crops_scale, d.local_crops_number, d.global_crop_size,
                             d.local_crop_size)


def test_the_workers_path_trains_with_the_losses_of_before(tmp_path, data_root, monkeypatch):
    now, before = Losses(), Losses()
    pretrain(tiny(tmp_path, data_root, "run.name=now", "data.augment_on=workers"), extra_callbacks=[now])
    monkeypatch.setitem(METHODS, "dino", replace(METHODS["dino"], transform=as_before))
    pretrain(tiny(tmp_path, data_root, "run.name=before"), extra_callbacks=[before])
    assert now.values == before.values and len(now.values) == 2
