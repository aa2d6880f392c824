"""The first screen of ``make pretrain``: the run header and what the user acts on, none of the
libraries' own notices (issue 27, item 12). A subprocess, because pytest intercepts warnings in-process."""
import os
import subprocess
import sys
from pathlib import Path

from tests.tiny_runs import DINO_TINY

ROOT = Path(__file__).resolve().parents[1]
NOT_THE_USERS = (
    "litlogger", "litmodels", "💡 Tip",                          # Lightning's cloud advertisements
    "`Trainer(limit_train_batches=1.0)` was configured",         # the default, said back
    "isinstance(treespec, LeafSpec)",                            # Lightning's use of torch's _pytree
    "`torch.jit.script` is deprecated",                          # torch's own jvp decompositions
)


def test_the_first_screen_is_the_run_header_not_the_libraries_notices(tmp_path):
    # A kernel kappa (forward-mode autodiff: torch loads its jvp decompositions) and one tiny epoch.
    watched = ["diagnostics.every_n_epochs=1", "diagnostics.jacobian_images=0", "diagnostics.layers=[0]",
               "diagnostics.images=2", "diagnostics.max_iter=3"]
    args = [*DINO_TINY, *watched, f"data.root={tmp_path / 'data'}", f"run.root={tmp_path / 'runs'}", "run.name=a"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "skipless.pretrain", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    screen = done.stdout + done.stderr
    assert done.returncode == 0, screen
    assert "skipless pretrain: ssl=dino model=skipless" in screen and "precision 32-true" in screen
    assert "GPU available" in screen  # the device line is the user's
    for notice in NOT_THE_USERS:
        assert notice not in screen, notice
