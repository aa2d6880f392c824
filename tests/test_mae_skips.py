"""The suite's reading of seed 002's encoder-to-decoder skips: the mirror pairs, their checks, and
one skip's projection with mask tokens put back in patch order."""
import pytest
import torch

from skipless.errors import ModelArgumentError
from skipless.ssl.mae.autoencoder import random_masking
from skipless.ssl.mae.decoder import EncoderSkip, check_skip_pairs, mirror_skip_pairs


def test_mirror_pairs_vit_b_and_decoder_8():
    assert mirror_skip_pairs(12, 8) == [(1, 7), (3, 6), (5, 5), (7, 4), (9, 3), (11, 2)]


def test_mirror_pairs_shallower_decoder_takes_the_deepest_taps():
    assert mirror_skip_pairs(12, 4) == [(5, 3), (7, 2), (9, 1), (11, 0)]


def test_mirror_pairs_deeper_decoder_gets_its_last_blocks_fed():
    assert mirror_skip_pairs(4, 8) == [(1, 7), (3, 6)]
    assert mirror_skip_pairs(1, 8) == []


def test_check_accepts_config_lists_and_none():
    assert check_skip_pairs([[1, 7], [3, 6]], 12, 8) == [(1, 7), (3, 6)]
    assert check_skip_pairs(None, 12, 8) == [] == check_skip_pairs([], 12, 8)
    assert check_skip_pairs([(0, 0), (0, 1)], 12, 8) == [(0, 0), (0, 1)]  # one encoder block, two decoder blocks


@pytest.mark.parametrize("pairs", [[(12, 2)], [(1, 8)], [(-1, 2)], [(1, -1)]])
def test_check_refuses_a_block_that_does_not_exist(pairs):
    with pytest.raises(ModelArgumentError, match="does not exist.*negative indices are not allowed"):
        check_skip_pairs(pairs, 12, 8)


def test_check_refuses_two_skips_into_one_decoder_block():
    with pytest.raises(ModelArgumentError, match="decoder block 6 receives two skips"):
        check_skip_pairs([(1, 6), (3, 6)], 12, 8)


@pytest.mark.parametrize("pair", [(1,), (1, 2, 3), (1.0, 2), (True, 2), "17"])
def test_check_refuses_what_is_not_two_indices(pair):
    with pytest.raises(ModelArgumentError, match="is not two block indices"):
        check_skip_pairs([pair], 12, 8)


def test_skip_puts_projected_visible_tokens_in_place_and_its_mask_token_elsewhere():
    torch.manual_seed(0)
    B, N, enc_dim, dec_dim = 3, 16, 12, 8
    skip = EncoderSkip(enc_dim, dec_dim)
    torch.nn.init.normal_(skip.mask_token)
    _, mask, ids_restore = random_masking(torch.zeros(B, N, 1), 0.75)
    tap = torch.randn(B, 1 + 4, enc_dim)  # CLS + 4 visible tokens in shuffled order
    out = skip.expand(tap, ids_restore)
    assert out.shape == (B, 1 + N, dec_dim)
    projected = skip.embed(skip.norm(tap))
    torch.testing.assert_close(out[:, 0], projected[:, 0])  # CLS kept, projected
    for b in range(B):
        for n in range(N):
            if mask[b, n]:
                torch.testing.assert_close(out[b, 1 + n], skip.mask_token[0, 0])
            else:
                torch.testing.assert_close(out[b, 1 + n], projected[b, 1 + ids_restore[b, n]])
    x = torch.randn(B, 1 + N, dec_dim)
    torch.testing.assert_close(skip(x, tap, ids_restore), skip.fuse(torch.cat([x, out], -1)))
