"""The one rule of every entry point: a user-facing error is one sentence, a bug keeps its traceback."""
import pytest

from skipless.config import ConfigError
from skipless.errors import ModelArgumentError, SkiplessError, exit_on_user_error
from skipless.models import create_vit


def test_a_user_error_ends_the_program_with_its_sentence():
    def body():
        raise ConfigError("unknown config key 'train.epochz'")

    with pytest.raises(SystemExit) as stop:
        exit_on_user_error(body)
    assert stop.value.code == "error: unknown config key 'train.epochz'"


def test_a_bug_keeps_its_traceback_and_a_result_passes_through():
    def bug():
        raise ValueError("an internal invariant broke")

    with pytest.raises(ValueError, match="internal invariant"):
        exit_on_user_error(bug)
    assert exit_on_user_error(lambda: 7) == 7


@pytest.mark.parametrize("kwargs", [{"residual": "half"}, {"init": "kaiming"}, {"init_args": {"gamma": 1.0}},
                                    {"pos_embed_interp": "nearest"}, {"global_pool": "max"}])
def test_an_unknown_model_argument_is_a_user_error_listing_the_valid_values(kwargs):
    with pytest.raises(ModelArgumentError, match="expected") as err:
        create_vit("vit_tiny", depth=1, **kwargs)
    assert isinstance(err.value, SkiplessError)


class _Malformed:
    """A dataset whose second item breaks its layout, as a reader in a loader worker finds it."""

    def __len__(self):
        return 2

    def __getitem__(self, index):
        from skipless.data.errors import MalformedDatasetError
        if index == 1:
            raise MalformedDatasetError("mask 'x.png' is 40x36 but its image is 44x36; see data/README.md")
        return index


def test_an_error_raised_in_a_loader_worker_is_the_same_one_sentence():
    from torch.utils.data import DataLoader

    for workers in (0, 1):
        with pytest.raises(SystemExit) as stop:
            exit_on_user_error(lambda: list(DataLoader(_Malformed(), batch_size=1, num_workers=workers)))
        assert stop.value.code == "error: mask 'x.png' is 40x36 but its image is 44x36; see data/README.md"
