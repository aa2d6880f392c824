"""The Figure 2 panel: its shape, the pasted-back visible patches, the grey masked patches, and the
de-normalisation of a normalised-target prediction with each patch's own statistics."""
import torch

from skipless.data.conventions import IMAGENET_MEAN, IMAGENET_STD
from skipless.models.vit import create_vit
from skipless.ssl.mae.autoencoder import reconstruction_target
from skipless.ssl.mae.autoencoder import random_masking
from skipless.ssl.mae.autoencoder import MaskedAutoencoder
from skipless.ssl.mae.autoencoder import patchify, unpatchify
from skipless.ssl.mae.module import GREY, reconstruction_panel, reconstruction_rows

P = 8
MEAN = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
STD = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)


def _normalised_images(B=2):
    """Display images in [0, 1], ImageNet-normalised as the loaders give them."""
    pixels = torch.rand(B, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return pixels, (pixels - MEAN) / STD


def _pixel_mask(mask):
    return unpatchify(mask[..., None].expand(-1, -1, P * P * 3), P, (4, 4)).bool()


def test_pasted_back_visible_patches_are_the_original_pixels_and_masked_ones_the_reconstruction():
    pixels, images = _normalised_images()
    _, mask, _ = random_masking(torch.zeros(2, 16, 1), 0.75, torch.Generator().manual_seed(1))
    pred = torch.randn(2, 16, P * P * 3, generator=torch.Generator().manual_seed(2))
    rows = reconstruction_rows(images, pred, mask, P, norm_pix=True)
    assert rows.shape == (2, 4, 3, 32, 32) and rows.min() >= 0 and rows.max() <= 1
    original, masked, recon, pasted = rows.unbind(1)
    m = _pixel_mask(mask)
    torch.testing.assert_close(original, pixels)
    torch.testing.assert_close(pasted[~m], pixels[~m])
    torch.testing.assert_close(pasted[m], recon[m])
    assert not torch.allclose(recon[~m], pixels[~m], atol=0.05)  # the random prediction is not the image
    torch.testing.assert_close(masked[~m], pixels[~m])
    assert (masked[m] == GREY).all()


def test_a_perfect_normalised_prediction_de_normalises_to_the_original():
    pixels, images = _normalised_images()
    mask = torch.ones(2, 16)
    rows = reconstruction_rows(images, reconstruction_target(images, P, norm_pix=True), mask, P, norm_pix=True)
    torch.testing.assert_close(rows[:, 2], pixels, atol=1e-5, rtol=0)
    # Plain pixels: the prediction is the patches themselves.
    rows = reconstruction_rows(images, patchify(images, P), mask, P, norm_pix=False)
    torch.testing.assert_close(rows[:, 2], pixels, atol=1e-5, rtol=0)


def test_panel_is_one_row_of_four_per_image_and_keeps_the_training_mode():
    torch.manual_seed(0)
    encoder = create_vit("vit_micro", img_size=32, patch_size=P, embed_dim=32, depth=2, num_heads=4)
    mae = MaskedAutoencoder(encoder, decoder_dim=32, decoder_depth=1, decoder_heads=4).train()
    _, images = _normalised_images(3)
    panel = reconstruction_panel(mae, images, generator=torch.Generator().manual_seed(4), padding=2)
    assert panel.shape == (3, 3 * (32 + 2) + 2, 4 * (32 + 2) + 2) and panel.dtype == torch.float32
    assert mae.training
    mae.eval()
    _, pred, mask = mae(images, generator=torch.Generator().manual_seed(4))
    rows = reconstruction_rows(images, pred, mask, P, norm_pix=True)
    torch.testing.assert_close(panel[:, 2:34, 2 + 3 * 34:2 + 3 * 34 + 32], rows[0, 3])  # first image, pasted
