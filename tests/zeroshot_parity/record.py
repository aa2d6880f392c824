"""Records what lm-evaluation-harness computes on a tiny model and tiny task files, for
``tests/test_zeroshot_parity.py``; not a test, and not run by the suite (lm-eval is no dependency of the suite).

What it writes beside itself (all committed, so the test reads fixed inputs):

- ``tokenizer.json``: a byte-level BPE of 300 tokens (``skipless.data.text.bpe.train_bpe``) trained on ``TEXT``;
- ``backbone.pt``: a ``create_causal_lm("lm_demo", residual="skip")`` with width 32, 2 layers, 2 heads, SwiGLU 64,
  the tokenizer's vocabulary and a context of ``CONTEXT`` tokens, drawn with ``torch.manual_seed(0)``
  (``save_backbone``); the short context makes several requests longer than it (left truncation);
- ``tasks/``: the five tasks' items (``ITEMS``) as JSON lines in the Hugging Face layout, under the names
  ``skipless.data.text.tasks`` looks for; each task holds items for the sharp edges of the scoring (HellaSwag's
  `` [title]``, brackets and double spaces, a context that ends in a space, a WinoGrande option that is empty,
  so that its context is empty, choices of unequal length in characters, 3 and 5 ARC choices);
- ``lmeval.json``: per task, per item, each request's ``(context, continuation)`` as lm-eval built it, its
  log-likelihood and greedy flag, the item's ``acc`` / ``acc_norm``, and the task's metrics and standard errors,
  with the versions that made them.

lm-eval runs its own code end to end: its task YAMLs (included, only the dataset pointed at the local file and
ARC's test split dropped), ``simple_evaluate``, and its Hugging Face model class ``HFLM`` (``_encode_pair``,
``loglikelihood``, ``_loglikelihood_tokens`` with its left truncation) around our model, wrapped as a
``transformers.PreTrainedModel``. Made with lm-eval 0.4.13, installed apart from the project's environment:

    .venv/bin/python -m pip install --target /tmp/lmeval-site lm-eval==0.4.13
    .venv/bin/python -m pip install --no-deps --target /tmp/lmeval-site transformers accelerate safetensors psutil
    PYTHONPATH=src .venv/bin/python tests/zeroshot_parity/record.py --site /tmp/lmeval-site

(``--site`` is put *after* the environment's own packages on ``sys.path``, so torch, numpy and tokenizers stay
the environment's.) Rewriting the inputs changes the recorded values: run it again and commit both.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONTEXT = 32
VOCAB = 300
TEXT = [
    "Question: how do you boil water? Answer: put it in a pot on the stove and wait until it bubbles.",
    "The dog ran to the park, and the cat stayed home by the window in the warm sun.",
    "To open a jar, twist the lid hard; if it sticks, run the lid under hot water first.",
    "She went to the store to buy bread, milk and eggs for breakfast on a cold morning.",
    "Plants need light, water and air; a seed grows into a tree over many years.",
    "[header] How to clean a window [title] Mix water and soap in a bucket. [step] Wipe the glass.",
] * 4

ITEMS = {
    "piqa": [
        {"goal": "How do you boil water?", "sol1": "Put it in a pot on the stove.", "sol2": "Put it in the freezer.",
         "label": 0},
        {"goal": "To open a jar that sticks", "sol1": "run the lid under hot water", "sol2": "hit it", "label": 0},
        {"goal": "Keep bread fresh", "sol1": "leave it open on the table for a week", "sol2": "wrap it", "label": 1},
        {"goal": "To grow a tree from a seed in the garden behind the house where the light is warm and the water "
                 "is near, over many years of patient care, what do you do first", "sol1": "plant it",
         "sol2": "eat it", "label": 0},
        {"goal": "Wash a window ", "sol1": "with soap and water", "sol2": "with milk", "label": 0},
    ],
    "hellaswag": [
        {"ind": 1, "activity_label": "Home and Garden", "ctx_a": "[header] How to clean a window [title] Mix water and "
         "soap.", "ctx_b": "", "ctx": "", "endings": ["[step] Wipe  the glass with a cloth.", "Eat the soap.",
                                                     "[substeps] Paint the  window red.", "Sleep."],
         "label": "0", "source_id": "wikihow~1", "split": "val", "split_type": "indomain"},
        {"ind": 2, "activity_label": "Walking the dog", "ctx_a": "A man walks a dog to the park.",
         "ctx_b": "the Dog Runs", "ctx": "", "endings": ["after a ball.", "into the sun and the warm water.",
                                                       "home.", "to the store to buy bread."],
         "label": "0", "source_id": "activitynet~1", "split": "val", "split_type": "indomain"},
        {"ind": 3, "activity_label": "Cooking", "ctx_a": "She puts water in a pot.", "ctx_b": "she [title]",
         "ctx": "", "endings": ["waits until it bubbles.", "eats the pot.", "runs.", "reads a book about the sun."],
         "label": "0", "source_id": "wikihow~2", "split": "val", "split_type": "indomain"},
        {"ind": 4, "activity_label": "Gardening", "ctx_a": "A woman plants a seed in the garden behind the house, "
         "where the light is warm and the water is near, and waits for many years while", "ctx_b": "the tree",
         "ctx": "", "endings": ["grows.", "sings a song about bread and milk and eggs.", "flies.", "melts."],
         "label": "2", "source_id": "activitynet~2", "split": "val", "split_type": "indomain"},
    ],
    "winogrande": [
        {"sentence": "The dog ran to the park because _ wanted to play.", "option1": "the dog", "option2": "the park",
         "answer": "1"},
        {"sentence": "The cat stayed home by the window since _ was warm in the sun.", "option1": "the window ",
         "option2": "the cat", "answer": "2"},
        {"sentence": "_ went to the store to buy bread and milk.", "option1": "", "option2": "She", "answer": "2"},
        {"sentence": "Plants need light and water and air, and a seed that gets them grows into _ over many years of "
                     "care in the garden.", "option1": "a tree", "option2": "a stone", "answer": "1"},
    ],
    "arc_easy": [
        {"id": "e1", "question": "What do plants need to grow?", "choices": {
            "text": ["light and water", "bread", "a cold morning", "milk and eggs"], "label": ["A", "B", "C", "D"]},
         "answerKey": "A"},
        {"id": "e2", "question": "Where does a dog run?", "choices": {
            "text": ["to the park", "into the jar", "up the window"], "label": ["A", "B", "C"]}, "answerKey": "A"},
        {"id": "e3", "question": "How do you boil water?", "choices": {
            "text": ["in a pot", "in the freezer", "with soap", "by the window", "on the stove in a pot"],
            "label": ["1", "2", "3", "4", "5"]}, "answerKey": "5"},
        {"id": "e4", "question": "Which one is a seed that grows into a tree over many years in the garden behind "
                                 "the house where the light is warm?", "choices": {
            "text": ["an acorn", "a stone", "a cup of milk", "bread"], "label": ["A", "B", "C", "D"]},
         "answerKey": "A"},
    ],
    "arc_challenge": [
        {"id": "c1", "question": "Why does water bubble in a pot on the stove?", "choices": {
            "text": ["it is hot", "it is cold", "the pot is blue", "the dog ran"], "label": ["A", "B", "C", "D"]},
         "answerKey": "A"},
        {"id": "c2", "question": "A seed grows into a tree over many years. What does it need?", "choices": {
            "text": ["light, water and air", "bread and eggs", "a jar with a lid", "soap"],
            "label": ["A", "B", "C", "D"]}, "answerKey": "A"},
        {"id": "c3", "question": "Which is warm?", "choices": {
            "text": ["the sun", "a cold morning", "ice"], "label": ["A", "B", "C"]}, "answerKey": "A"},
    ],
}
FILES = {"piqa": "piqa/validation.jsonl", "hellaswag": "hellaswag/validation.jsonl",
         "winogrande": "winogrande/validation.jsonl", "arc_easy": "ARC-Easy/validation.jsonl",
         "arc_challenge": "ARC-Challenge/validation.jsonl"}
YAMLS = {"piqa": "piqa/piqa.yaml", "hellaswag": "hellaswag/hellaswag.yaml", "winogrande": "winogrande/default.yaml",
         "arc_easy": "arc/arc_easy.yaml", "arc_challenge": "arc/arc_challenge.yaml"}


def write_inputs() -> None:
    """The tokenizer, the model and the task files (module docstring)."""
    import torch

    from skipless.data.text.bpe import train_bpe
    from skipless.data.text.tokenizer import load_tokenizer
    from skipless.models import create_causal_lm
    from skipless.models.checkpoint import save_backbone

    train_bpe(iter(TEXT), HERE / "tokenizer.json", VOCAB)
    tokenizer = load_tokenizer(HERE / "tokenizer.json")
    torch.manual_seed(0)
    model = create_causal_lm("lm_demo", residual="skip", embed_dim=32, depth=2, num_heads=2, mlp_hidden=64,
                             vocab_size=tokenizer.vocab_size, context=CONTEXT)
    save_backbone(HERE / "backbone.pt", model)
    for task, items in ITEMS.items():
        path = HERE / "tasks" / FILES[task]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(i, sort_keys=True) + "\n" for i in items))


def run_lm_eval() -> dict:
    """lm-eval 0.4.x on the model and task files; the recorded values."""
    import importlib.metadata

    import torch
    import transformers
    from transformers.modeling_outputs import CausalLMOutput

    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from skipless.models.checkpoint import load_backbone

    lm = load_backbone(HERE / "backbone.pt").eval()

    class Wrapped(transformers.PreTrainedModel):
        """Our model as the ``transformers.PreTrainedModel`` HFLM takes: ``forward(input_ids).logits``."""
        config_class = transformers.PretrainedConfig

        def __init__(self, config, model):
            super().__init__(config)
            self.model = model

        def forward(self, input_ids, attention_mask=None, **kwargs):
            return CausalLMOutput(logits=self.model(input_ids))

    config = transformers.PretrainedConfig(max_position_embeddings=CONTEXT, vocab_size=lm.vocab_size)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(HERE / "tokenizer.json"),
                                                     eos_token="<|endoftext|>")
    model = HFLM(pretrained=Wrapped(config, lm), tokenizer=tokenizer, backend="causal", max_length=CONTEXT,
                 batch_size=3, device="cpu")
    tasks_dir = Path(lm_eval.__file__).parent / "tasks"
    with tempfile.TemporaryDirectory() as include:
        for task, yaml in YAMLS.items():
            lines = [f"include: {tasks_dir / yaml}", f"task: {task}_parity", "dataset_path: json",
                     "dataset_name: null", "dataset_kwargs:", "  data_files:",
                     f"    validation: {HERE / 'tasks' / FILES[task]}", "test_split: null", "training_split: null"]
            Path(include, f"{task}.yaml").write_text("\n".join(lines) + "\n")
        manager = TaskManager(include_path=include)
        out = lm_eval.simple_evaluate(model=model, tasks=[f"{t}_parity" for t in YAMLS], task_manager=manager,
                                      num_fewshot=0, log_samples=True, random_seed=0, numpy_random_seed=0,
                                      torch_random_seed=0, fewshot_random_seed=0)
    recorded = {"made_by": "tests/zeroshot_parity/record.py",
                "versions": {p: importlib.metadata.version(p) for p in ("lm_eval", "transformers", "datasets")}
                | {"torch": torch.__version__},
                "context": CONTEXT, "tasks": {}}
    for task in YAMLS:
        name = f"{task}_parity"
        metrics = out["results"][name]
        samples = sorted(out["samples"][name], key=lambda s: s["doc_id"])
        recorded["tasks"][task] = {
            "metrics": {k.split(",")[0]: v for k, v in metrics.items() if k.split(",")[0] in
                        ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr")},
            "n": len(samples),
            "items": [{"doc_id": s["doc_id"], "requests": [list(a) for a in s["arguments"]],
                       "loglikelihoods": [r[0][0] for r in s["resps"]], "greedy": [r[0][1] for r in s["resps"]],
                       **{m: s[m] for m in ("acc", "acc_norm") if m in s}} for s in samples]}
    return recorded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", required=True, help="the folder lm-eval was installed into with pip --target")
    args = parser.parse_args()
    sys.path.append(args.site)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    write_inputs()
    recorded = run_lm_eval()
    (HERE / "lmeval.json").write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    for task, r in recorded["tasks"].items():
        print(task, r["n"], {k: round(v, 4) if isinstance(v, float) else v for k, v in r["metrics"].items()})


if __name__ == "__main__":
    main()
