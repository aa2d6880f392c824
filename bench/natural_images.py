"""ImageNet-sized JPEGs with natural-image statistics, generated at bench time for the ``loader`` section.

A loader's cost per image is set by the file's size in pixels (decode, crops), by how much detail the
JPEG coder had to keep (the decoder's entropy decoding grows with it) and hardly by what the image
shows. The demo's generated scenes (160-224 px, flat shapes) say nothing about that at full scale; these
images are meant to:

- **spectrum**: each colour channel has a 1/f^alpha amplitude spectrum with random phases, alpha drawn
  per image in [0.9, 1.2] (natural scenes average about 1: Field 1987, van der Schaaf and van Hateren
  1996), made by filtering white noise in the Fourier domain;
- **colour**: the three channels are mixed from independent 1/f fields by the Cholesky factor of a
  correlation matrix with off-diagonal 0.85-0.93 (RGB channels of natural images correlate about that
  much), so each channel keeps the 1/f spectrum; per-image brightness around ImageNet's mean colour,
  pixel standard deviation about 55 of 255;
- **edges and objects**: 3 to 8 occluding ellipses and polygons with hard edges, each filled with its own
  colour and a shifted copy of a second 1/f texture (a "dead leaves" picture: occlusion edges are
  themselves 1/f);
- **size**: drawn from sizes common in ImageNet's train set, most of whose Flickr images are 500 px on
  the longer side (500 x 375 most often, 500 x 333, portrait 375 x 500 and 333 x 500, 500 x 500, 500 x 400),
  with a few larger ones (640 x 480, 800 x 600) for its longer tail (the weights are ours, not counted
  from ImageNet);
- **file**: baseline JPEG at quality 90 with 4:2:0 chroma subsampling; the files average about 120 kB,
  near ImageNet's train files (about 115 kB: its 138 GiB train archive over 1.28 million files).

Image ``i`` of seed ``s`` depends on ``(s, i)`` only (numpy's ``default_rng([s, i])``; libjpeg's encoder
is deterministic), so a cache of the first ``n`` images serves every later call asking for ``n`` or fewer,
and a larger ``n`` only adds files. Each file is written atomically, so an interrupted generation
leaves whole files and the next call writes the rest.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from skipless.atomic import atomic_write

VERSION = 1  # in the cache folder's name: a change of the recipe above must not reuse older files
# (width, height), weight: the commonest ImageNet shapes first (module docstring).
SIZES = (((500, 375), 0.40), ((500, 333), 0.15), ((375, 500), 0.12), ((333, 500), 0.06), ((500, 500), 0.10),
         ((500, 400), 0.07), ((640, 480), 0.06), ((800, 600), 0.04))
QUALITY = 90
ALPHA = (0.9, 1.2)
CHANNEL_CORRELATION = np.array([[1.0, 0.92, 0.85], [0.92, 1.0, 0.93], [0.85, 0.93, 1.0]])
MEAN_RGB = np.array([0.485, 0.456, 0.406]) * 255  # ImageNet's mean colour
PIXEL_STD = 55.0


def one_over_f(rng: np.random.Generator, height: int, width: int, alpha: float, channels: int = 3) -> np.ndarray:
    """(channels, H, W) independent fields, each of zero mean and unit variance, amplitude spectrum 1/f^alpha."""
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = np.inf  # no DC component
    spectrum = np.fft.rfft2(rng.standard_normal((channels, height, width))) * f ** -alpha
    field = np.fft.irfft2(spectrum, s=(height, width))
    field -= field.mean(axis=(1, 2), keepdims=True)
    return field / field.std(axis=(1, 2), keepdims=True)


def correlated(fields: np.ndarray) -> np.ndarray:
    """Three unit-variance fields mixed into RGB channels with ``CHANNEL_CORRELATION`` between them."""
    return np.einsum("ij,jhw->ihw", np.linalg.cholesky(CHANNEL_CORRELATION), fields)


def image_size(rng: np.random.Generator) -> tuple[int, int]:
    """(width, height) drawn from ``SIZES``."""
    weights = np.array([w for _, w in SIZES])
    return SIZES[rng.choice(len(SIZES), p=weights / weights.sum())][0]


def natural_image(seed: int, index: int, size: tuple[int, int] | None = None) -> Image.Image:
    """Image ``index`` of ``seed`` (module docstring), RGB, ``size`` (width, height) or one drawn from ``SIZES``."""
    rng = np.random.default_rng([seed, index])
    width, height = image_size(rng) if size is None else size
    alpha = rng.uniform(*ALPHA)
    picture = correlated(one_over_f(rng, height, width, alpha))
    texture = correlated(one_over_f(rng, height, width, alpha))
    for _ in range(rng.integers(3, 9)):
        mask = Image.new("L", (width, height), 0)
        draw = ImageDraw.Draw(mask)
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(0.08, 0.35) * min(width, height)
        if rng.random() < 0.5:
            aspect = rng.uniform(0.5, 2.0)
            draw.ellipse([cx - r * aspect, cy - r / aspect, cx + r * aspect, cy + r / aspect], fill=255)
        else:
            angles = np.sort(rng.uniform(0, 2 * np.pi, rng.integers(3, 8)))
            radii = r * rng.uniform(0.5, 1.0, len(angles))
            draw.polygon([(float(cx + a * np.cos(t)), float(cy + a * np.sin(t))) for t, a in zip(angles, radii)],
                         fill=255)
        inside = np.asarray(mask) > 0
        shift = rng.integers(0, [height, width])
        fill = rng.normal(0.0, 0.8, (3, 1, 1)) + rng.uniform(0.3, 0.8) * np.roll(texture, tuple(shift), axis=(1, 2))
        picture = np.where(inside[None], fill, picture)
    mean = MEAN_RGB + rng.normal(0.0, 20.0)
    pixels = mean[:, None, None] + PIXEL_STD * picture / picture.std()
    return Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8).transpose(1, 2, 0), "RGB")


def cache_folder(root: str | Path, seed: int, size: tuple[int, int] | None = None) -> Path:
    """Where the images of ``seed`` (of one ``size``, or of ``SIZES``) are kept under ``root``, the recipe's
    version in the name."""
    fixed = "" if size is None else f"-{size[0]}x{size[1]}"
    return Path(root) / f"natural-jpeg-v{VERSION}-seed{seed}{fixed}"


def ensure_natural_jpegs(root: str | Path, n: int, seed: int = 0, size: tuple[int, int] | None = None) -> list[Path]:
    """The paths of images 0 .. n-1 of ``seed`` under ``cache_folder(root, seed, size)``, writing those
    missing; ``size`` (width, height) for all of them, or None: each drawn from ``SIZES``."""
    folder = cache_folder(root, seed, size)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{i:05d}.jpg" for i in range(n)]
    for i, path in enumerate(paths):
        if not path.is_file():
            image = natural_image(seed, i, size)
            atomic_write(path, lambda tmp, image=image: image.save(tmp, format="JPEG", quality=QUALITY,
                                                                   subsampling="4:2:0"))
    return paths


def amplitude_slope(image: Image.Image, band: tuple[float, float] = (0.02, 0.25)) -> float:
    """The log-log slope of the radially averaged amplitude spectrum of the image's luminance over the
    frequencies in ``band`` (cycles per pixel): about -1 for natural images."""
    gray = np.asarray(image.convert("L"), dtype=np.float64)
    gray -= gray.mean()
    window = np.hanning(gray.shape[0])[:, None] * np.hanning(gray.shape[1])[None, :]
    amplitude = np.abs(np.fft.rfft2(gray * window))
    fy = np.fft.fftfreq(gray.shape[0])[:, None]
    fx = np.fft.rfftfreq(gray.shape[1])[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    edges = np.geomspace(*band, 16)
    which = np.digitize(f, edges)
    centres, means = [], []
    for b in range(1, len(edges)):
        ring = which == b
        if ring.any():
            centres.append(np.sqrt(edges[b - 1] * edges[b]))
            means.append(amplitude[ring].mean())
    return float(np.polyfit(np.log(centres), np.log(means), 1)[0])
