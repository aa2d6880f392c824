"""train.compile: the compiled backbones train the same numbers as the eager ones (to float tolerance),
keep their parameter names, and a compilation failure falls back to eager instead of stopping the run."""
import pytest
import torch

from skipless.config import load_config
from skipless.pretrain import pretrain
from skipless.train import train
from tiny_runs import DINO_TINY, SUP_TINY, Losses

@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.mark.parametrize("entry,run,tiny", [("pretrain", pretrain, DINO_TINY), ("train", train, SUP_TINY)])
def test_compiled_backbones_train_the_eager_numbers(tmp_path, data_root, entry, run, tiny):
    losses = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        rec = Losses()
        cfg = load_config(entry, [*tiny, f"data.root={data_root}", f"run.root={tmp_path}", f"run.name=c{compiled}",
                                  f"train.compile={str(compiled).lower()}"])
        _, module = run(cfg, extra_callbacks=[rec])
        losses[compiled] = rec.values
        names = [n for n, _ in module.named_parameters()]
        assert not any("_orig_mod" in n for n in names)  # compiled in place: the eager names
    assert len(losses[True]) == 2
    torch.testing.assert_close(torch.tensor(losses[True]), torch.tensor(losses[False]), rtol=1e-4, atol=1e-5)


def test_a_compilation_failure_falls_back_to_eager(monkeypatch):
    """A backend that cannot compile: the module still runs, eagerly, and gives the eager output."""
    import torch._dynamo

    from skipless.models import create_vit
    from skipless.models.compile import compile_in_place

    def broken_backend(gm, example_inputs):
        raise RuntimeError("no compiler here")

    torch._dynamo.reset()
    model = create_vit("vit_tiny", depth=1).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        eager = model(x)
    compile_in_place([model], True)
    model._compiled_call_impl = torch.compile(model._call_impl, backend=broken_backend)
    with torch.no_grad():
        torch.testing.assert_close(model(x), eager)
    torch._dynamo.reset()


def test_compiled_blocks_give_the_eager_features_and_compile_one_graph_for_all_blocks():
    """The evaluators' ``compile`` (``compile_blocks``): extract_features (block outputs,
    q/k/v and attention maps through the capture hooks) gives the eager values, and the blocks share
    their graphs (regional compilation: one graph per call pattern, not one per block)."""
    import torch._dynamo.utils

    from skipless.models import create_vit, extract_features, freeze_for_eval
    from skipless.models.compile import compile_blocks

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = freeze_for_eval(create_vit("vit_tiny", depth=3, img_size=32), "cpu")
    x = torch.randn(2, 3, 32, 32)
    kinds = ("out", "q", "k", "v", "attn")
    with torch.inference_mode():
        eager = extract_features(model, x, "all", kinds, norm=True)
    compile_blocks(model, True)
    assert all(getattr(b, "_compiled_call_impl", None) is not None for b in model.blocks)
    assert getattr(model, "_compiled_call_impl", None) is None  # the blocks, not the whole network
    torch._dynamo.utils.counters.clear()
    with torch.inference_mode():
        compiled = extract_features(model, x, "all", kinds, norm=True)
        outs = extract_features(model, x, "all", ("out",), norm=True)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2  # capturing or not, for all 3 blocks
    assert sorted(compiled) == sorted(eager)
    for key, value in eager.items():
        torch.testing.assert_close(compiled[key], value, rtol=1e-4, atol=1e-5)
    for key, value in outs.items():
        torch.testing.assert_close(value, eager[key], rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


@pytest.mark.parametrize("setting,mode,graphs", [(False, None, False), (True, {}, False),
                                                 ("reduce-overhead", {"mode": "reduce-overhead"}, True),
                                                 ("max-autotune-no-cudagraphs", {"mode": "max-autotune-no-cudagraphs"},
                                                  False)])
def test_train_compile_passes_its_mode_to_torch_compile_and_marks_cuda_graph_steps(monkeypatch, setting, mode, graphs):
    """``train.compile`` true / a mode reaches ``nn.Module.compile`` (static shapes); with CUDA graphs each
    micro-batch of ``micro_steps`` begins a new graph step, and otherwise none does."""
    import lightning.pytorch as pl
    import torch.compiler

    from skipless.models import compile as compiling
    from skipless.training.micro_batches import MicroBatches, micro_steps

    calls, marks = [], []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: calls.append(kw))
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    monkeypatch.setitem(compiling._graphs, "on", False)
    compiling.compile_in_place([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)], setting)
    assert calls == ([] if mode is None else [{"dynamic": False, **mode}] * 2)
    parts = MicroBatches([torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(1, 3)])
    assert [w for _, w in micro_steps(pl.LightningModule(), parts, 2)] == pytest.approx([0.4, 0.4, 0.2])
    assert len(marks) == (3 if graphs else 0)


def test_an_unknown_compile_mode_is_refused_in_one_sentence_before_anything_is_written(tmp_path):
    from skipless.config import ConfigError
    from skipless.pretrain import check_keys

    root = f"run.root={tmp_path}"
    check_keys(load_config("pretrain", [*DINO_TINY, root, "train.compile=reduce-overhead"]))
    with pytest.raises(ConfigError, match=r"train.compile must be .*reduce-overhead.*got 'fast'"):
        check_keys(load_config("pretrain", [*DINO_TINY, root, "train.compile=fast"]))
    assert list(tmp_path.iterdir()) == []
