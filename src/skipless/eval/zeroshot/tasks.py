"""The five tasks as lm-evaluation-harness 0.4.x's task files define them, zero-shot, and their metrics.

Per task (``lm_eval/tasks/<task>/``; an item is in the Hugging Face layout, ``skipless.data.text.tasks``):

- ``piqa`` (``piqa.yaml``): context ``"Question: {goal}\\nAnswer:"``, choices ``[sol1, sol2]``, gold ``label``;
  acc and acc_norm; the seed's column is acc.
- ``hellaswag`` (``hellaswag.yaml``, ``utils.py``): context ``preprocess(activity_label + ": " + ctx_a + " " +
  ctx_b.capitalize())``, choices ``preprocess(ending)``, gold ``int(label)``; ``preprocess`` strips the text, turns
  " [title]" into ". ", removes every ``[...]`` (WikiHow's artifacts) and then one pass of double spaces; acc and
  acc_norm, the column acc_norm. (``str.capitalize`` also lowercases the rest of ``ctx_b``, as lm-eval's does.)
- ``winogrande`` (``default.yaml``, ``preprocess_winogrande.py``): *partial evaluation*: the blank ``_`` splits
  the sentence; each option fills it to make one **context** (``sentence[:blank] + option``), and the two share
  **one continuation**, ``sentence[blank + 1:].strip()``, so the model is asked which filled-in prefix makes the
  rest of the sentence likelier; gold ``answer`` "1" -> 0, "2" -> 1; acc only.
- ``arc_easy``, ``arc_challenge`` (``arc_easy.yaml``, ``arc_challenge.yaml``): context ``"Question: {question}\\n
  Answer:"``, choices ``choices.text``, gold ``choices.label.index(answerKey)``; acc and acc_norm; the columns are
  ARC-Easy acc and ARC-Challenge acc_norm (issue 49: the tables of the flash-linear-attention codebase).

Every continuation is ``" " + choice`` (the target delimiter). Per item: ``acc`` = 1 when the choice of highest
log-likelihood is the gold one; ``acc_norm`` the same on log-likelihood / the choice's length **in characters**
(``len(choice)``, without the delimiter; ties go to the first choice, as ``np.argmax``). A task's value is the
mean over items and its standard error lm-eval's ``mean_stderr``: the sample standard deviation (n - 1) over
sqrt(n) (None for one item). The chance level is the mean over items of 1 / number of choices.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .harness import TARGET_DELIMITER, Request


@dataclass(frozen=True)
class Item:
    """One task item as requests: one per choice, the gold choice's index and the choice texts (what acc_norm
    divides by)."""

    requests: list[Request]
    gold: int
    choices: list[str]


def hellaswag_preprocess(text: str) -> str:
    """lm-eval's ``hellaswag/utils.py`` ``preprocess``."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def _question_answer(question: str) -> str:
    return f"Question: {question}\nAnswer:"


def _choice_requests(context: str, choices: Sequence[str]) -> list[Request]:
    return [Request(context, TARGET_DELIMITER + c) for c in choices]


def piqa_item(doc: dict) -> Item:
    choices = [doc["sol1"], doc["sol2"]]
    return Item(_choice_requests(_question_answer(doc["goal"]), choices), int(doc["label"]), choices)


def hellaswag_item(doc: dict) -> Item:
    context = hellaswag_preprocess(doc["activity_label"] + ": " + doc["ctx_a"] + " " + doc["ctx_b"].capitalize())
    choices = [hellaswag_preprocess(e) for e in doc["endings"]]
    return Item(_choice_requests(context, choices), int(doc["label"]), choices)


def winogrande_item(doc: dict) -> Item:
    blank = doc["sentence"].index("_")
    contexts = [doc["sentence"][:blank] + option for option in (doc["option1"], doc["option2"])]
    continuation = doc["sentence"][blank + 1:].strip()
    return Item([Request(c, TARGET_DELIMITER + continuation) for c in contexts], {"1": 0, "2": 1}[doc["answer"]],
                contexts)


def arc_item(doc: dict) -> Item:
    choices = list(doc["choices"]["text"])
    return Item(_choice_requests(_question_answer(doc["question"]), choices),
                doc["choices"]["label"].index(doc["answerKey"]), choices)


@dataclass(frozen=True)
class TaskSpec:
    """A task: its name as lm-eval calls it, its title in reports, its metrics, the headline one and its items."""

    name: str
    title: str
    metrics: tuple[str, ...]
    headline: str
    item: Callable[[dict], Item]


TASK_SPECS: dict[str, TaskSpec] = {
    "piqa": TaskSpec("piqa", "PIQA", ("acc", "acc_norm"), "acc", piqa_item),
    "hellaswag": TaskSpec("hellaswag", "HellaSwag", ("acc", "acc_norm"), "acc_norm", hellaswag_item),
    "winogrande": TaskSpec("winogrande", "WinoGrande", ("acc",), "acc", winogrande_item),
    "arc_easy": TaskSpec("arc_easy", "ARC-Easy", ("acc", "acc_norm"), "acc", arc_item),
    "arc_challenge": TaskSpec("arc_challenge", "ARC-Challenge", ("acc", "acc_norm"), "acc_norm", arc_item),
}


def item_metrics(log_likelihoods: Sequence[float], item: Item) -> dict[str, float]:
    """``acc`` and ``acc_norm`` of one item from its choices' log-likelihoods (lm-eval's ``process_results``,
    with numpy's ``argmax``: the first among equals)."""
    lls = np.asarray(log_likelihoods, dtype=np.float64)
    lengths = np.asarray([float(len(c)) for c in item.choices])
    with np.errstate(divide="ignore", invalid="ignore"):  # an empty choice: as numpy divides, as lm-eval does
        normed = lls / lengths
    return {"acc": float(int(np.argmax(lls)) == item.gold), "acc_norm": float(int(np.argmax(normed)) == item.gold)}


def mean_stderr(values: Sequence[float]) -> float | None:
    """lm-eval's ``mean_stderr``: sample standard deviation (n - 1) / sqrt(n); None for fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    mu = sum(values) / n
    return math.sqrt(sum((x - mu) ** 2 for x in values) / (n - 1)) / math.sqrt(n)


def chance(items: Sequence[Item]) -> float:
    """The expected accuracy of a uniform random guess: the mean of 1 / choices."""
    return sum(1.0 / len(i.choices) for i in items) / len(items)


__all__ = ["Item", "TASK_SPECS", "TaskSpec", "arc_item", "chance", "hellaswag_item",
           "hellaswag_preprocess", "item_metrics", "mean_stderr", "piqa_item", "winogrande_item"]
