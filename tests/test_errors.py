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
