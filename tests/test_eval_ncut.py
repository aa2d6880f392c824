"""eval/tokencut/ncut.py: the graph, the Ncut vector against the dense generalized solve, seed and component rules."""
import numpy as np
import pytest
import scipy.linalg
import torch

from skipless.eval.tokencut.ncut import (UNIQUE_GAP, affinity, bipartition, component_box, discover, lapack_spectrum,
                                ncut_spectrum, reference_spectrum, second_eigenvector_reference, second_eigenvectors,
                                seed_component)


def _clustered(n: int, clusters: int, dim: int, seed: int) -> torch.Tensor:
    """Features of ``clusters`` noisy groups: a graph with a clear Ncut structure but random edges."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(clusters, dim, generator=gen)
    labels = torch.randint(0, clusters, (n,), generator=gen)
    return centres[labels] + 1.2 * torch.randn(n, dim, generator=gen)


def _dense(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = np.diag(a.sum(1))
    return scipy.linalg.eigh(d - a, d)


def test_affinity_binarises_cosine_similarity_at_tau():
    feats = torch.tensor([[1.0, 0.0], [2.0, 0.1], [0.0, 3.0], [-1.0, 0.0]])
    a = affinity(feats, tau=0.2, eps=1e-5)
    cos = torch.nn.functional.normalize(feats, dim=1) @ torch.nn.functional.normalize(feats, dim=1).T
    assert torch.equal(a == 1, cos > 0.2) and torch.all((a == 1) | (a == 1e-5))
    assert torch.all(a.diagonal() == 1) and torch.equal(a, a.T)
    scaled = affinity(feats * torch.tensor([[3.0], [0.5], [7.0], [2.0]]))  # cosine: scale-free per token
    assert torch.equal(scaled, a)


@pytest.mark.parametrize("n, clusters, seed", [(12, 2, 0), (40, 3, 1), (97, 4, 2), (150, 2, 3)])
def test_second_eigenvector_matches_the_dense_generalized_solution(n, clusters, seed):
    a = affinity(_clustered(n, clusters, 16, seed))
    values, vectors = _dense(a.double().numpy())
    assert values[2] - values[1] > 1e-6, "test graph must have a unique second eigenvector"
    ref = vectors[:, 1]
    d = a.double().sum(1).numpy()
    for dtype, tol in ((torch.float64, 1e-8), (torch.float32, 1e-3)):
        x = second_eigenvectors(a, dtype).double().numpy()
        assert abs(np.sum(x * d * x) - 1) < tol  # D-normalised like scipy's
        assert abs(abs(np.sum(x * d * ref)) - 1) < tol  # the same vector up to sign
        assert np.array_equal(bipartition(x)[0], bipartition(ref)[0])  # the same partition
    x, gap = lapack_spectrum(a.numpy())
    assert abs(abs(np.sum(x * d * ref)) - 1) < 1e-8 and gap == pytest.approx(values[2] - values[1], rel=1e-8)
    np.testing.assert_allclose(np.abs(second_eigenvector_reference(a.numpy())), np.abs(ref), atol=1e-8)


def test_batched_solve_equals_one_by_one():
    a = torch.stack([affinity(_clustered(30, 3, 8, s)) for s in range(4)])
    batched = second_eigenvectors(a)
    for i in range(4):
        single = second_eigenvectors(a[i])
        assert torch.allclose(batched[i].abs(), single.abs(), atol=1e-10)


def test_seed_rule_flips_the_partition_so_the_seed_is_foreground():
    x = np.array([-5.0, 1.0, 1.0, 1.0, 1.0, 0.5])  # mean -0.08: the seed (index 0) lies below it
    fg, seed = bipartition(x)
    assert seed == 0 and fg.tolist() == [True, False, False, False, False, False]
    for other in (-x, 3.0 * x, -0.1 * x):  # sign and scale do not matter
        assert np.array_equal(bipartition(other)[0], fg) and bipartition(other)[1] == 0
    fg2, seed2 = bipartition(np.array([0.1, 0.2, 4.0, -1.0]))  # seed above the mean: no flip
    assert seed2 == 2 and fg2.tolist() == [False, False, True, False]


def test_tied_seeds_are_broken_by_position_not_by_rounding():
    x = np.array([0.0, 0.3, 1.0 - 1e-9, -0.5, 1.0, 0.2])  # entries 2 and 4 equal up to rounding
    assert bipartition(x)[1] == 2 and bipartition(-x)[1] == 2
    assert bipartition(np.array([0.0, 0.9, 1.0, 0.1]))[1] == 2  # a real difference is no tie


def test_entries_at_the_mean_are_background_whatever_the_sign():
    # two patches carry the vector, the rest sit at the mean up to rounding noise (seen on real graphs)
    noise = np.array([3e-17, -2e-17, 1e-17, -4e-17, 0.0])
    x = np.concatenate([[0.06, -0.06], noise])
    for v in (x, -x, np.concatenate([[0.06, -0.06], -noise])):
        fg, seed = bipartition(v)
        assert seed == 0 and fg.tolist() == [True, False, False, False, False, False, False]


def test_ncut_spectrum_reports_a_complete_graph_as_ambiguous():
    complete = torch.ones(2, 9, 9)
    _, gap = ncut_spectrum(complete)
    assert torch.all(gap < UNIQUE_GAP)
    _, gap = ncut_spectrum(affinity(_object_scene())[None])
    assert gap[0] > UNIQUE_GAP
    _, ref_gap = reference_spectrum(affinity(_object_scene()).numpy())
    assert ref_gap == pytest.approx(gap[0].item(), rel=1e-6)


def test_component_is_the_seeds_not_the_largest():
    fg = np.zeros((6, 8), dtype=bool)
    fg[0:5, 0:4] = True  # large component
    fg[4:6, 6:8] = True  # small component with the seed
    fg[3, 5] = True      # touches the small one only diagonally: 4-connectivity keeps it apart
    comp = seed_component(fg, (5, 7))
    expected = np.zeros_like(fg)
    expected[4:6, 6:8] = True
    assert np.array_equal(comp, expected)
    with pytest.raises(ValueError, match="not in the foreground"):
        seed_component(fg, (5, 0))


def test_box_is_the_component_extent_in_pixels_clipped_to_the_image():
    comp = np.zeros((3, 5), dtype=bool)
    comp[1:3, 3:5] = True
    # padded grid of 3 x 5 patches of 16 px over a 40 x 70 image: the right and bottom edges are clipped
    np.testing.assert_array_equal(component_box(comp, 16, (40, 70)), [48, 16, 70, 40])
    np.testing.assert_array_equal(component_box(comp, 16, (48, 80)), [48, 16, 80, 48])


def _object_scene(rows=8, cols=10, box=(2, 3, 5, 7), seed=0):
    """Hand-built patch features: object patches near one direction, background near another."""
    gen = torch.Generator().manual_seed(seed)
    obj, bg = torch.zeros(32), torch.zeros(32)
    obj[0], bg[1] = 1.0, 1.0
    feats = bg + 0.05 * torch.randn(rows, cols, 32, generator=gen)
    r0, c0, r1, c1 = box
    feats[r0:r1, c0:c1] = obj + 0.05 * torch.randn(r1 - r0, c1 - c0, 32, generator=gen)
    return feats.reshape(rows * cols, 32)


@pytest.mark.parametrize("solver", ["torch", "lapack", "scipy"])
def test_an_obvious_object_is_found(solver):
    feats = _object_scene()
    a = affinity(feats)
    solve = {"torch": lambda g: second_eigenvectors(torch.from_numpy(g)).numpy(),
             "lapack": lambda g: lapack_spectrum(g)[0], "scipy": second_eigenvector_reference}[solver]
    x = solve(a.numpy())
    found = discover(x, (8, 10), 16, (8 * 16 - 5, 10 * 16 - 9))
    np.testing.assert_array_equal(found.box, [3 * 16, 2 * 16, 7 * 16, 5 * 16])
    assert found.component.sum() == 12 and found.foreground.sum() == 12
    assert 2 <= found.seed[0] < 5 and 3 <= found.seed[1] < 7
    assert found.vector[found.component].min() > found.vector[~found.foreground].max()  # signed: object high
