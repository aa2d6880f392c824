"""Rendering of the embedded default's scenes: shapes, materials, one scene with its exact masks.

``synthetic.py`` writes these scenes to disk in the VOC layout and says why they look as they do;
this module only draws them. Scene ``i`` depends only on ``(seed, i)``: its own ``numpy`` Generator.
Photographs and textures come from the scikit-image wheel's bundled ``data/`` folder, read by path,
so nothing is ever downloaded.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter
from scipy import ndimage

GENERATOR_VERSION = 6  # bump whenever the rendering changes: existing defaults are then regenerated
CLASSES: tuple[str, ...] = ("background", "disc", "square", "triangle", "star", "ring", "cross",
                            "hexagon", "crescent", "ellipse", "heart")
SIDES = (160, 176, 192, 208, 224)  # image width and height are each drawn from these
BAND = 2  # width in pixels of the void (255) band that VOC draws along object boundaries
SUPERSAMPLE = 4  # silhouettes are drawn at 4x and box-filtered: antialiased edges
# Bundled in the scikit-image wheel (checked for 0.22-0.26); the others of skimage.data are fetched
# over the network by pooch and must never be used here.
BACKGROUNDS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png",
               "hubble_deep_field.jpg", "brick.png", "grass.png", "gravel.png", "camera.png",
               "moon.png", "ihc.png")
TEXTURES = ("brick.png", "grass.png", "gravel.png", "ihc.png", "coins.png", "moon.png", "cell.png",
            "camera.png")
FLIPPABLE = {"brick.png", "grass.png", "gravel.png", "moon.png", "ihc.png", "hubble_deep_field.jpg"}

_SOURCES: dict[str, Image.Image] = {}


def skimage_data_dir() -> Path:
    """The ``data/`` folder of the installed scikit-image, found without importing it."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("scikit-image is needed to generate the default dataset (pip install scikit-image)")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def _source(name: str) -> Image.Image:
    """A bundled photograph or texture, decoded once per process."""
    if name not in _SOURCES:
        path = skimage_data_dir() / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is not bundled in this scikit-image; the default dataset "
                                    "needs scikit-image>=0.22 (see data/README.md)")
        with Image.open(path) as image:
            _SOURCES[name] = image.convert("L" if image.mode in ("L", "I;16") else "RGB")
    return _SOURCES[name]


# --------------------------------------------------------------------------- shapes
def _circle(radius: float, cx: float = 0.0, cy: float = 0.0, n: int = 96) -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return np.stack([cx + radius * np.cos(t), cy + radius * np.sin(t)], 1)


def _regular(n: int, radius: float, phase: float = -np.pi / 2) -> np.ndarray:
    t = phase + np.arange(n) * 2 * np.pi / n
    return np.stack([radius * np.cos(t), radius * np.sin(t)], 1)


def _star() -> np.ndarray:
    outer, inner = _regular(5, 1.15), _regular(5, 0.47, phase=-np.pi / 2 + np.pi / 5)
    return np.stack([outer, inner], 1).reshape(-1, 2)


def _cross(arm: float = 0.34) -> np.ndarray:
    a, b = arm, 1.0
    return np.array([(-a, -b), (a, -b), (a, -a), (b, -a), (b, a), (a, a), (a, b), (-a, b), (-a, a),
                     (-b, a), (-b, -a), (-a, -a)])


def _heart() -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, 96, endpoint=False)
    x = 16 * np.sin(t) ** 3
    y = 13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t)
    return np.stack([x / 15.0, -(y + 2.5) / 15.0], 1)  # y flipped: image rows grow downwards


# Each class: polygons in a unit frame (radius about 1), drawn in order with fill 1 (object) or
# 0 (a hole: the ring's centre, the crescent's bite). Sizes are chosen so that areas are similar.
SHAPES: dict[str, list[tuple[np.ndarray, int]]] = {
    "disc": [(_circle(1.0), 1)],
    "square": [(np.array([(-0.88, -0.88), (0.88, -0.88), (0.88, 0.88), (-0.88, 0.88)]), 1)],
    "triangle": [(_regular(3, 1.25) + (0, 0.1), 1)],
    "star": [(_star(), 1)],
    "ring": [(_circle(1.05), 1), (_circle(0.58), 0)],
    "cross": [(_cross(), 1)],
    "hexagon": [(_regular(6, 1.0, phase=0.0), 1)],
    "crescent": [(_circle(1.05), 1), (_circle(0.88, cx=0.5), 0)],
    "ellipse": [(_circle(1.0) * (1.3, 0.55), 1)],
    "heart": [(_heart(), 1)],
}
assert tuple(SHAPES) == CLASSES[1:]


def _silhouette(shape: str, center: tuple[float, float], radius: float, angle: float, aspect: float,
                size: tuple[int, int]) -> tuple[np.ndarray, bool]:
    """Antialiased coverage (H, W) in [0, 1] of one placed shape, and whether it leaves the image."""
    width, height = size
    cos, sin = np.cos(angle), np.sin(angle)
    rotation = np.array([[cos, -sin], [sin, cos]])
    stretch = np.array([np.sqrt(aspect), 1 / np.sqrt(aspect)]) * radius
    canvas = Image.new("L", (width * SUPERSAMPLE, height * SUPERSAMPLE), 0)
    draw = ImageDraw.Draw(canvas)
    truncated = False
    for polygon, fill in SHAPES[shape]:
        points = (polygon * stretch) @ rotation.T + center
        if fill:
            truncated |= bool((points.min(0) < 0).any() or points[:, 0].max() > width
                              or points[:, 1].max() > height)
        draw.polygon([tuple(p) for p in points * SUPERSAMPLE], fill=255 * fill)
    coverage = np.asarray(canvas.reduce(SUPERSAMPLE), dtype=np.float32) / 255.0
    return coverage, truncated


# --------------------------------------------------------------------------- colour and texture
def _hsv_to_rgb(h: float, s: float, v: float) -> np.ndarray:
    k = (np.array([5.0, 3.0, 1.0]) + h * 6) % 6
    return v - v * s * np.clip(np.minimum(k, 4 - k), 0, 1)


def _crop(rng: np.random.Generator, name: str, size: tuple[int, int], min_scale: float) -> np.ndarray:
    """A random crop of a source resized to ``size``, float32 (H, W) or (H, W, 3) in [0, 1]."""
    source = _source(name)
    sw, sh = source.size
    aspect = size[0] / size[1]
    ch = min(sh, sw / aspect) * rng.uniform(min_scale, 1.0)
    cw = ch * aspect
    x0, y0 = rng.uniform(0, sw - cw), rng.uniform(0, sh - ch)
    crop = source.resize(size, Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
    array = np.asarray(crop, dtype=np.float32) / 255.0
    if rng.random() < 0.5:
        array = array[:, ::-1]
    if name in FLIPPABLE and rng.random() < 0.5:
        array = array[::-1]
    return array


def _colourise(rng: np.random.Generator, array: np.ndarray) -> np.ndarray:
    """Random but plausible colour shift; grayscale sources get a tint so that nothing is gray."""
    if array.ndim == 2:
        tint = _hsv_to_rgb(rng.random(), rng.uniform(0.05, 0.5), 1.0)
        array = array[..., None] * (tint / tint.mean()).astype(np.float32)
    gray = array.mean(2, keepdims=True)
    array = gray + (array - gray) * rng.uniform(0.5, 1.3)  # saturation
    mean = array.mean()
    array = mean + (array - mean) * rng.uniform(0.7, 1.15)  # contrast
    array = array * rng.uniform(0.7, 1.2) * rng.uniform(0.9, 1.1, size=3)  # brightness, white balance
    return np.clip(array, 0, 1).astype(np.float32)


def _background(rng: np.random.Generator, size: tuple[int, int]) -> np.ndarray:
    """A colour-shifted photograph or texture crop; sometimes two, split by a wavy horizon."""
    width, height = size
    image = _colourise(rng, _crop(rng, BACKGROUNDS[rng.integers(len(BACKGROUNDS))], size, 0.35))
    if rng.random() < 0.35:
        ground = _colourise(rng, _crop(rng, BACKGROUNDS[rng.integers(len(BACKGROUNDS))], size, 0.35))
        x = np.arange(width)
        horizon = height * rng.uniform(0.4, 0.75) + height * 0.05 * np.sin(
            x * 2 * np.pi / width * rng.uniform(0.5, 2.0) + rng.uniform(0, 2 * np.pi))
        rows = np.arange(height)[:, None]
        weight = np.clip((rows - horizon[None, :]) / 4.0 + 0.5, 0, 1)[..., None].astype(np.float32)
        image = image * (1 - weight) + ground * weight
    # Shallow depth of field and haze: the objects stand in front of a softer, paler scene, so the
    # scene's photograph is not the easiest thing for self-supervision to recognise (generator v3).
    mean = image.mean((0, 1), keepdims=True)
    image = mean + rng.uniform(0.45, 0.75) * (image - mean)
    blurred = Image.fromarray((np.clip(image, 0, 1) * 255).astype(np.uint8)).filter(
        ImageFilter.GaussianBlur(rng.uniform(1.0, 3.0)))
    image = np.asarray(blurred, dtype=np.float32) / 255.0
    return image


def _surface(rng: np.random.Generator, size: tuple[int, int], class_index: int) -> np.ndarray:
    """What an object is made of, float32 (H, W, 3): usually (85%) its class's material, a hue near
    ``(k - 1) / 10`` of the colour circle (s.d. 0.03, DINO's hue jitter reaches +-0.1) with
    saturation and brightness from 0.5 to 1 and the class's texture; else any hue, and any texture or a flat colour."""
    width, height = size
    typical = rng.random() < 0.85
    hue = ((class_index - 1) / (len(CLASSES) - 1) + rng.normal(0, 0.03)) % 1.0 if typical else rng.random()
    colour = _hsv_to_rgb(hue, rng.uniform(0.5, 1.0), rng.uniform(0.5, 1.0))
    if typical:
        name = TEXTURES[(class_index - 1) % len(TEXTURES)]
    elif rng.random() < 0.5:
        return np.broadcast_to(colour, (height, width, 3)).astype(np.float32)
    else:
        name = TEXTURES[rng.integers(len(TEXTURES))]
    texture = _crop(rng, name, size, 0.2)
    if texture.ndim == 3:
        texture = texture.mean(2)
    relative = texture / max(float(texture.mean()), 1e-3) - 1.0
    strength = rng.uniform(0.5, 0.9)
    return np.clip(colour * (1.0 + strength * relative[..., None]), 0, 1).astype(np.float32)


def _blur(array: np.ndarray, radius: float) -> np.ndarray:
    image = Image.fromarray((np.clip(array, 0, 1) * 255).astype(np.uint8))
    return np.asarray(image.filter(ImageFilter.GaussianBlur(radius)), dtype=np.float32) / 255.0


def _shift(array: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """Translate a 2-D array by whole pixels, filling with zeros (no wrap-around)."""
    out = np.zeros_like(array)
    h, w = array.shape
    out[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
        array[max(-dy, 0):h - max(dy, 0), max(-dx, 0):w - max(dx, 0)]
    return out


# --------------------------------------------------------------------------- one scene
def render(index: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """Draw scene ``index``: image uint8 (H, W, 3), instance map uint8 (H, W) and the objects.

    The instance map holds 0 for background, k for the k-th listed object and 255 for the void
    band; objects are listed in drawing order with their class, visible box (0-based inclusive
    pixel extents of their instance pixels) and truncated / occluded flags.
    """
    rng = np.random.default_rng([seed, index])
    size = (int(rng.choice(SIDES)), int(rng.choice(SIDES)))
    width, height = size
    image = _background(rng, size)
    light = rng.uniform(0, 2 * np.pi)
    light_dir = np.array([np.cos(light), np.sin(light)])
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    depth = np.zeros((height, width), dtype=np.uint8)  # which drawn object is on top (0 = none)
    placed: list[dict] = []
    wanted = int(rng.choice([1, 2, 3], p=[0.4, 0.35, 0.25]))
    for order in range(wanted):
        for _attempt in range(12):
            shape = CLASSES[1 + int(rng.integers(len(CLASSES) - 1))]
            radius = (rng.uniform(0.28, 0.42) if order == 0 else rng.uniform(0.15, 0.27)) * min(size)
            center = (rng.uniform(0.15, 0.85) * width, rng.uniform(0.15, 0.85) * height)
            coverage, truncated = _silhouette(shape, center, radius, rng.uniform(0, 2 * np.pi),
                                              float(np.exp(rng.uniform(-0.18, 0.18))), size)
            mask = coverage >= 0.5
            if mask.sum() < 200:
                continue
            new_depth = np.where(mask, len(placed) + 1, depth)
            # Every earlier object keeps at least half of itself in view, or the scene is redrawn.
            if all((new_depth == k + 1).sum() >= max(150, 0.5 * o["area"]) for k, o in enumerate(placed)):
                break
        else:
            continue
        depth = new_depth
        placed.append({"name": shape, "area": int(mask.sum()), "truncated": truncated})
        # Drop shadow, away from the light, on whatever lies below.
        if rng.random() < 0.6:
            offset = -light_dir * radius * rng.uniform(0.08, 0.18)
            shadow = _blur(_shift(coverage, int(round(offset[0])), int(round(offset[1]))), radius * 0.12)
            image = image * (1 - np.float32(rng.uniform(0.3, 0.55)) * shadow[..., None])
        # Surface, kept distinguishable from what is behind it, with directional light and a bevel.
        behind = image[mask].mean(0)
        for _retry in range(4):
            surface = _surface(rng, size, CLASSES.index(shape))
            if np.linalg.norm(surface[mask].mean(0) - behind) > 0.2:
                break
        along = ((xs - np.float32(center[0])) * np.float32(light_dir[0] / radius)
                 + (ys - np.float32(center[1])) * np.float32(light_dir[1] / radius))
        bevel = np.clip(2 * _blur(mask.astype(np.float32), max(1.5, 0.12 * radius)) - 1, 0, 1)
        shading = np.clip(1 + 0.25 * along, 0.6, 1.4) * (0.7 + 0.3 * bevel)
        surface = np.clip(surface * shading[..., None], 0, 1, dtype=np.float32)
        image = image * (1 - coverage[..., None]) + surface * coverage[..., None]
    image = image * 255 + rng.normal(0, 2.0, image.shape).astype(np.float32)  # sensor noise
    image = np.clip(image, 0, 255).astype(np.uint8)

    # Void band on the lower side of each boundary (background next to an object, or an occluded
    # object next to its occluder): the antialiased, mixed pixels are ignored, as in VOC.
    band = ndimage.maximum_filter(depth, size=2 * BAND + 1) > depth
    objects, instance = [], np.zeros_like(depth)
    for k, o in enumerate(placed, start=1):
        visible = (depth == k) & ~band
        if not visible.any():
            continue
        rows, cols = np.nonzero(visible)
        instance[visible] = len(objects) + 1
        objects.append({"name": o["name"], "truncated": o["truncated"],
                        "occluded": bool((depth == k).sum() < o["area"]),
                        "box": (int(cols.min()), int(rows.min()), int(cols.max()), int(rows.max()))})
    instance[band] = 255
    return image, instance, objects
