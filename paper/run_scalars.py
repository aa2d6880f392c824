"""A training run's TensorBoard scalars, read back for the report's ``history`` items: the loss curves of
Ji et al.'s Figure 1 (supervised ViT-B) and Figure 9 (DINO ViT-S) come out of the runs' own events.

Every run writes its events under ``<run>/tb/`` (a resumed run adds files beside the first). At each
step that logs a metric through ``self.log``, Lightning logs the 0-based epoch beside it, which the runs'
logger writes as ``watch/epoch`` (``skipless/training/trainer.py``, ``RunLogger``): that is how a step is
placed in its epoch here.
"""
from __future__ import annotations

from pathlib import Path

EPOCH_TAG = "watch/epoch"  # Lightning's own epoch scalar (0-based) as RunLogger names it


def read_scalars(run_dir: Path, tags: list[str]) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of a run's TensorBoard scalars, in step order, every event file of
    ``run_dir/tb`` read once (a step written twice, by a resumed run, keeps the later file's value); a
    tag the run never wrote is an empty list."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points: dict[str, dict[int, float]] = {tag: {} for tag in tags}
    for events in sorted((Path(run_dir) / "tb").rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        written = set(acc.Tags().get("scalars", []))
        for tag in tags:
            if tag in written:
                points[tag].update({e.step: e.value for e in acc.Scalars(tag)})
    return {tag: sorted(found.items()) for tag, found in points.items()}


def epoch_means(run_dir: Path, tags: list[str]) -> dict[str, dict[int, float]]:
    """``{tag: {epoch: mean}}``: each tag's mean over the steps of each epoch (1-based, as the paper counts
    them), a step placed by the epoch scalar logged at the same step; steps without one are left out."""
    found = read_scalars(run_dir, [*tags, EPOCH_TAG])
    epoch_of = {step: int(value) + 1 for step, value in found[EPOCH_TAG]}
    means: dict[str, dict[int, float]] = {}
    for tag in tags:
        per_epoch: dict[int, list[float]] = {}
        for step, value in found[tag]:
            if step in epoch_of:
                per_epoch.setdefault(epoch_of[step], []).append(value)
        means[tag] = {e: sum(v) / len(v) for e, v in sorted(per_epoch.items())}
    return means
