"""make paper EXP=theory (paper/theory.py): the report of the seeds' checkable claims, with its figures."""
import torch

import paper.theory as theory
from paper.__main__ import main


def test_make_paper_exp_theory_writes_every_section_with_its_verdicts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(theory, "DRAWS", 40)
    monkeypatch.setattr(theory, "MOMENT_DRAWS", 400)
    monkeypatch.setitem(theory.SECTIONS, "Fig. 6", lambda folder: theory.fig6(
        folder, lambda count, size: torch.randn(count, 3, size, size), count=2, size=32))
    monkeypatch.setitem(theory.SECTIONS, "Lemma 1", lambda folder: theory.lemma1(2))
    monkeypatch.setitem(theory.SECTIONS, "MLP, Eq. 6", lambda folder: theory.eq6_seed003(4, 1))
    monkeypatch.setitem(theory.SECTIONS, "App. B, Eq. 24", lambda folder: theory.eq24(3, 1))
    monkeypatch.setitem(theory.SECTIONS, "Thm A.1", lambda folder: theory.thm_a1(1))
    assert main(["exp=theory", f"root={tmp_path}"]) == 0
    folder = tmp_path / "theory"
    report = (folder / "report.md").read_text()
    for section in ("## Fig. 5", "## Eqs. 14-20", "## Fig. 6", "## Props. 4.1-4.2", "## Thm 2.2", "## Eq. 6, App. A.4.4",
                    "## Lemma 1 (seed 000", "## MLP, Eq. 6 (seed 003", "## App. B, Eq. 24 (seed 003",
                    "## Thm A.1 (seed 004"):
        assert section in report
    assert set(theory.SOURCES) == set(theory.SECTIONS)
    # Lemma 1: in alpha at beta 0 yes, at beta > 0 no; Eq. 24's counterexample fails; Thm A.1 holds at every K
    assert "| alpha -> 0 at beta 0 | the derivative / alpha stays bounded |" in report
    assert "| alpha = 0 at beta > 0 | the derivative is 0 |" in report and "does not vanish with alpha |" in report
    assert "| eq24_counterexample: kernels [-a, 1, a], [a, 1, -a] | 2 | 6 x 6 | 1 | 0 of 1 | inf |" in report
    thm = report.split("## Thm A.1")[1]
    assert thm.count(" of 4 |") == 2 * len(theory.THM_A1_STEPS) and thm.count("| 4 of 4 |") == thm.count(" of 4 |")
    assert (folder / "fig5-softmax.png").stat().st_size > 10_000 and (folder / "thm22-spectra.png").is_file()
    # Eq. 17 as printed fails, Eq. 14 holds; OSA keeps full rank, softmax ends at rank 1
    assert "| 0.1, 5 | b_off | 0, 1 | 0, 64 |" in report and "| 0.1, 5 | a_diag | 64, 128 | 64, 128 |" in report
    b_off = next(line for line in report.splitlines() if line.startswith("| 0.1, 5 | b_off"))
    a_diag = next(line for line in report.splitlines() if line.startswith("| 0.1, 5 | a_diag"))
    assert b_off.endswith("| **no** |") and a_diag.endswith("| yes |")
    assert "| osa | 50 / 50 / 50 / 50 / 50 / 50 / 50 |" in report and "/ 1 / 1 |" in report
    assert "| skip | timm | " in report and "| skipless | cutskip | " in report and "| **no** |" not in report.split(
        "## Eq. 6")[1]  # Eq. 6 holds at init on every model; Eq. 37 wherever defined
    assert f"report: {folder / 'report.md'}" in capsys.readouterr().out
    assert (folder / "fig6-pre-ln-tokens.png").is_file() and report.count("\n| 11 | ") == 1  # 12 blocks of ViT-S


def test_pre_ln_tokens_are_each_blocks_norm1_output():
    from skipless.models import create_vit

    model = create_vit("vit_tiny", depth=2, img_size=32)
    images = torch.randn(2, 3, 32, 32)
    tokens = theory.pre_ln_tokens(model, images)
    x = model.patch_embed(images)
    x = model._pos_embed(x)
    x = model.norm_pre(x)
    torch.testing.assert_close(tokens[0], model.blocks[0].norm1(x))
    torch.testing.assert_close(tokens[1], model.blocks[1].norm1(model.blocks[0](x)))


def test_the_eps_sweep_trains_each_cell_with_its_graying_and_reads_kappa_in_and_out(tmp_path):
    """make paper EXP=graying-eps (seed 003 Table 3, Fig. 4): 11 cells, each run's eps, ViT-B at full scale."""
    from paper.experiment import load_experiment
    from paper.jobs import plan
    from skipless.config import load_config

    experiment = load_experiment("graying-eps")
    full, _ = plan(experiment, "full", tmp_path)
    runs = {j.labels["graying"]: j for j in full if j.kind == "run"}
    assert len(runs) == 11
    for label, job in runs.items():
        cfg = load_config("train", [o for o in job.overrides if not o.startswith("run.")])
        method, _, eps = label.partition("-")
        assert cfg.model.token_graying.method == method and cfg.model.arch == "vit_base"
        assert cfg.model.token_graying.eps == (float(eps) if eps else None)
        assert cfg.diagnostics.every_n_epochs == 20 and cfg.diagnostics.layers == "all"
    metrics = {item.get("metric") for item in experiment.report}
    assert {"embeddings_mean_log_kappa.in", "embeddings_mean_log_kappa.attn+skip", "val.top1"} <= metrics


def test_the_init_sensitivity_sweep_moves_one_of_alpha_beta_c_at_a_time(tmp_path):
    """make paper EXP=init-sensitivity (seed 000 footnote 2) around Table 1's (2, 0.6, 3)."""
    from paper.experiment import load_experiment
    from paper.jobs import plan
    from skipless.config import load_config

    jobs, _ = plan(load_experiment("init-sensitivity"), "demo", tmp_path)
    seen = {}
    for job in jobs:
        cfg = load_config("train", [o for o in job.overrides if not o.startswith("run.")])
        assert cfg.model.init == "cutskip" and cfg.model.residual == "skipless"
        seen[job.labels["init"]] = (cfg.model.init_args.alpha, cfg.model.init_args.beta, cfg.model.init_args.c)
    paper = seen.pop("paper")
    assert paper == (2.0, 0.6, 3.0) and len(seen) == 8
    assert all(sum(a != b for a, b in zip(values, paper)) == 1 for values in seen.values())


def _cheap_sections(monkeypatch):
    """Every section but Fig. 6 reduced to a line: the tests below are about Fig. 6's images."""
    for title in theory.SECTIONS:
        if title != "Fig. 6":
            monkeypatch.setitem(theory.SECTIONS, title, lambda folder, title=title: [f"{title} computed"])


def test_full_scale_draws_fig6_on_imagenet_val_and_demo_on_the_default(tmp_path, monkeypatch):
    """SCALE=full: Fig. 6 reads $IMAGENET_ROOT/val (a fake ImageNet), report in <root>/full/theory/; the demo keeps
    fig6's defaults (the default's val images, 8 of them at 224 px: its numbers as before)."""
    import inspect

    from skipless.data.generator.fake_layouts import write_fake_imagenet

    imagenet = write_fake_imagenet(tmp_path / "in1k", ["n01", "n02", "n03", "n04"], per_class=2, size=40)
    monkeypatch.setenv("IMAGENET_ROOT", str(imagenet))
    monkeypatch.setattr(theory, "FIG6_FULL_IMAGES", 2)
    real = theory.fig6
    seen = {}

    def small_fig6(folder, images=theory.token_images, count=theory.FIG6_IMAGES, size=224, **kw):
        seen.update(images=images, count=count, size=size, **kw)
        return real(folder, images, count, 32, **kw)  # 32 px: a tiny ViT-S forward

    monkeypatch.setattr(theory, "fig6", small_fig6)
    _cheap_sections(monkeypatch)
    assert main(["exp=theory", "scale=full", f"root={tmp_path / 'out'}"]) == 0
    report = (tmp_path / "out" / "full" / "theory" / "report.md").read_text()
    assert f"on 2 of ImageNet val's images ({imagenet / 'val'}, evenly spaced" in report
    assert "The seed prints no number for Fig. 6" in report and report.count("\n| 11 | ") == 1
    assert seen["size"] == 224 and seen["count"] == 2
    # images 0 and 4 of the 8 sorted files: classes 0 and 2, each its flat colour, ImageNet-normalised
    colours = torch.tensor([[0.0, 0.0, 0.0], [74.0, 182.0, 46.0]]) / 255
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    expected = ((colours - mean) / std)[:, :, None, None].expand(2, 3, 16, 16)
    torch.testing.assert_close(seen["images"](2, 16), expected, atol=0.02, rtol=0)  # JPEG's flat colour, to 1/255

    seen.clear()
    monkeypatch.setattr(theory, "fig6", lambda folder, *args, **kw: seen.update(args=args, **kw))
    theory.fig6_at("demo")(tmp_path)  # the demo: fig6 as before, every default kept
    assert seen == {"args": ()}
    defaults = inspect.signature(real).parameters
    assert defaults["images"].default is theory.token_images and defaults["count"].default == 8
    assert defaults["source"].default == "the default's val images"


def test_full_scale_without_imagenet_is_one_sentence_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("IMAGENET_ROOT", str(tmp_path / "nowhere"))
    _cheap_sections(monkeypatch)
    assert main(["exp=theory", "scale=full", f"root={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: ImageNet val not found at {tmp_path / 'nowhere' / 'val'}: make paper EXP=theory "
                          "SCALE=full draws seed 000's Fig. 6 on ImageNet's val images; set IMAGENET_ROOT=")
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()
    assert main(["exp=theory", "scale=fast", f"root={tmp_path / 'out'}"]) == 2
    assert "scale=fast is not a scale" in capsys.readouterr().err and not (tmp_path / "out").exists()
