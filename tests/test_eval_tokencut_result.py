"""eval/tokencut/result.py and its outputs: a block whose graphs are mostly complete has no CorLoc."""
from pathlib import Path

import numpy as np

from skipless.eval.shared.backbones import BackboneSpec
from skipless.eval.tokencut.outputs import comparison, plot_comparison
from skipless.eval.tokencut.result import UNDEFINED_SHARE, BackboneResult


def _result(unique_per_block, hits_per_block):
    """4 images, one block per column: ``unique`` (has a unique Ncut vector) and ``hit`` (IoU >= 0.5)."""
    spec = BackboneSpec("b", None, Path("."), {})
    result = BackboneResult(spec, blocks=list(range(len(unique_per_block))), patch=16)
    for i in range(4):
        result.unique.append(np.array([u[i] for u in unique_per_block]))
        result.ious.append(np.array([0.9 if h[i] else 0.1 for h in hits_per_block]))
    return result


def test_a_block_is_undefined_when_more_than_half_its_graphs_are_ambiguous():
    assert UNDEFINED_SHARE == 50
    result = _result(unique_per_block=[[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]],
                     hits_per_block=[[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    assert result.ambiguous() == {0: 0.0, 1: 50.0, 2: 75.0}
    assert result.undefined_blocks() == [2]  # exactly half is still defined
    assert result.corloc()[2] == 100.0 and result.best_block() == 1  # block 2's 100 is the solver's, not chosen
    none = _result(unique_per_block=[[0, 0, 0, 1]], hits_per_block=[[1, 1, 1, 1]])
    assert none.undefined_blocks() == [0] and none.best_block() is None


def test_table_and_figure_show_undefined_blocks_with_their_share(tmp_path):
    summary = {"backbone": {"name": "b"}, "corloc": {"0": 25.0, "1": 50.0, "2": 100.0}, "undefined_blocks": [2],
               "ambiguous_percent": {"0": 0.0, "1": 50.0, "2": 75.0}, "best_block": 1, "best_corloc": 50.0,
               "seconds_per_image": {"total": 0.1}}
    table = comparison([summary])
    assert "| block 2 | undefined (75%) |" in table and "| block 1 | 50.0 |" in table
    assert "| best (block) | 50.0 (1) |" in table and "no unique Ncut vector" in table
    empty = dict(summary, undefined_blocks=[0, 1, 2], best_block=None, best_corloc=None)
    assert "| best (block) | none defined |" in comparison([empty])
    plot_comparison([summary, empty], tmp_path / "cmp.png", "default")
    assert (tmp_path / "cmp.png").stat().st_size > 0
