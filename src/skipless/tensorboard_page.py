"""``make tensorboard``: TensorBoard on ``runs/``, and the address of a first page that leads with the results.

TensorBoard's Time Series page lists every tag group in alphabetical order, so once an evaluator has run it
opens on ``probe/`` and ``tokencut-*/`` images above ``train/``, smooths a two-point k-NN curve to a value
it never had, and shows everything. Its address takes the page's state (``tagFilter``, a regular
expression of the tags shown, and ``smoothing``), so this prints, before TensorBoard starts, an address
that opens on the headline numbers only, unsmoothed:

- the training loss (``train/loss``; MAE's mean-patch floor ``train/mean_patch_loss`` beside it) and a
  supervised run's validation (``val/top1``, ``val/loss``);
- the k-NN of the exported backbone during training, with its random init on the same chart
  (``watch/knn/*``);
- each evaluation's number: the probe's ``probe/val_miou`` (every lr on one chart), k-NN's and linear's
  ``.../top1`` and ``.../val_top1``, TokenCut's ``.../best_corloc``.

Clearing the filter box shows every tag again; the plain address stays TensorBoard's own page. TensorBoard
reads the runs through a folder of links with short names (``reports/tensorboard_names.py``: ``<run>/probe-default/lr=0.01``
rather than ``<run>/eval/tb/probe-default/lr=0.01``), kept in step with ``runs/`` while it runs.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlencode

from .reports.tensorboard_names import ViewKeeper

HEADLINE_TAGS = (r"train/loss", r"train/mean_patch_loss", r"val/(top1|loss)", r"watch/knn/[^/]+", r"probe/val_miou", r"[^/]+/top1",
                 r"[^/]+/[^/]+/val_top1", r"[^/]+/best_corloc")
HEADLINE = "^(" + "|".join(HEADLINE_TAGS) + ")$"


def first_page(host: str, port: int) -> str:
    """The address of the Time Series page showing the headline tags unsmoothed."""
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0", "") else host
    query = urlencode({"tagFilter": HEADLINE, "smoothing": "0"})
    return f"http://{shown}:{port}/?{query}#timeseries"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6006)
    args = parser.parse_args(argv)
    print(f"TensorBoard of {args.logdir}/ on http://{args.host}:{args.port}/ ; the results first (training loss, "
          f"k-NN against its random init, each evaluation's number; unsmoothed; clear the filter for every tag):\n"
          f"  {first_page(args.host, args.port)}", flush=True)
    if not Path(args.logdir).is_dir():
        print(f"note: {args.logdir}/ holds no runs yet; they appear on the page as make pretrain, make train and the "
              f"evaluators write them", flush=True)
    from tensorboard import main as tensorboard_main

    view = Path(tempfile.mkdtemp(prefix="skipless-tensorboard-"))
    keeper = ViewKeeper(Path(args.logdir), view)
    try:
        sys.argv = ["tensorboard", "--logdir", str(view), "--host", args.host, "--port", str(args.port)]
        tensorboard_main.run_main()
    finally:
        keeper.stop()
        shutil.rmtree(view, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
