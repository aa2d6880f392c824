"""The config loader: one default YAML per entry point + group choices + CLI ``key=value``.

    cfg = load_config("pretrain", ["model=skipless", "optim=soap", "train.epochs=300"])

1. ``configs/<entry>.yaml`` is read; its ``defaults:`` mapping names one choice per group
   (``model: skipless``). A CLI item whose key is a group name (``model=skip``) changes that choice.
   A default may instead follow an earlier group's choice, written as a small table:
   ``recipe: {data=default: demo, otherwise: paper}`` picks ``demo`` when ``data`` is ``default``;
   a row may name several (``"ssl=mae,data=default": mae-demo``), all of which must hold. A table row
   ``per: <earlier group>`` makes the group's files belong to that group's choices: ``recipe=demo`` under
   ``ssl=mae`` reads ``recipe/mae-demo.yaml``; ``per: <name>`` that is no group (``per: supervised``)
   names the one method of the entry point. So a recipe is a method x a scale, and ``RECIPE=demo`` or
   ``RECIPE=paper`` means the chosen method's; another method's recipe is never read. ``choices`` records
   the scale (``recipe: demo``; the method is ``ssl``'s). A table row ``folder: <name>`` reads the group's
   files from ``configs/<name>/`` instead of ``configs/<group>/``: ``make lm``'s ``data`` group is its text
   (``folder: text``: ``data=c4`` reads ``text/c4.yaml``), so the key stays ``data=`` as at every entry point
   while the image datasets of ``configs/data/`` are never its choices.
2. Each chosen group file ``configs/<group>/<choice>.yaml`` is merged over the defaults, in the order
   of the ``defaults:`` mapping. Group files hold full paths (``model: {residual: skipless}``); by
   rule a group sets only its own section, except a recipe, which names a run's scale across sections.
3. Struct mode is switched on, then the remaining CLI items are applied: a key that does not exist
   is an error that names it (and the closest existing keys), never a silently ignored typo.
4. An entry may build on another: ``base: train`` in ``finetune.yaml`` takes ``train.yaml``'s keys, merges
   its own over them and chooses its own groups (``_entry_file``).
5. ``save_config`` writes the resolved result next to the run; ``load_saved_config`` reads it back.
6. An item ``--help`` (or ``-h``) prints ``config_help`` instead (the program's usage, its config file, groups
   and choices, every key and its default) and exits with status 0: every entry point has it, none writes first.

Modelled on dinov2's ``utils/config.py``, without Hydra.
"""
from __future__ import annotations

import difflib
import os
import sys
import textwrap
from pathlib import Path
from typing import Iterable, Sequence

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from ..atomic import atomic_write
from ..errors import SkiplessError, exit_on_user_error

# The defaults: $SKIPLESS_CONFIG_DIR, else the checkout's configs/ (a source tree or an editable install), else the
# copy an installed wheel carries as skipless/configs/ (setup.py maps configs/ there).
_PACKAGE = Path(__file__).resolve().parents[1]  # skipless/
_CHECKOUT_CONFIGS = _PACKAGE.parents[1] / "configs" if _PACKAGE.parent.name == "src" else None  # src/skipless/ -> configs/
CONFIG_DIR = Path(os.environ.get("SKIPLESS_CONFIG_DIR") or (
    _CHECKOUT_CONFIGS if _CHECKOUT_CONFIGS and _CHECKOUT_CONFIGS.is_dir() else _PACKAGE / "configs"))


# Groups that had another name at an entry point: ``make train`` chose ``dataset=`` and ``train-recipe=``
# before every training entry point said ``data=`` and ``recipe=``.
RENAMED_GROUPS = {"dataset": "data", "train-recipe": "recipe"}

# A command-line item that asks for the entry point's help (``config_help``) instead of a run.
HELP = ("-h", "--help")


class ConfigError(SkiplessError, ValueError):
    """A config that cannot be built as asked; the message says what was expected."""


def available(group: str, config_dir: Path = CONFIG_DIR) -> list[str]:
    """The choices of a config group: the YAML files in ``configs/<group>/``."""
    return sorted(p.stem for p in (config_dir / group).glob("*.yaml"))


def _leaf_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    keys = []
    for k in cfg.keys():
        path = f"{prefix}{k}"
        node = cfg._get_node(k)
        if isinstance(node, DictConfig):
            keys.append(path)
            keys.extend(_leaf_keys(node, path + "."))
        else:
            keys.append(path)
    return keys


def leaf_values(cfg: DictConfig, prefix: str = "") -> dict[str, object]:
    """Every leaf of ``cfg`` as ``{dotted key: plain value}`` (lists stay whole, as one value): what the
    config checks walk (``training/schema.py``) and what a resume compares (``training/run_folder.py``)."""
    out: dict[str, object] = {}
    for k in cfg.keys():
        node, key = cfg._get_node(k), f"{prefix}{k}"
        if isinstance(node, DictConfig):
            out.update(leaf_values(node, key + "."))
        else:
            value = cfg[k]
            out[key] = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
    return out


def _split_overrides(items: Iterable[str], groups: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    choices, rest = {}, []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value (--help lists the keys)")
        key, value = item.split("=", 1)
        key = key.strip()
        if key in groups:
            choices[key] = value.strip()
        else:
            rest.append(f"{key}={value}")
    return choices, rest


def load_config(entry: str, overrides: Iterable[str] = (), config_dir: Path | str = CONFIG_DIR) -> DictConfig:
    """Build the resolved config of an entry point (see the module docstring). An item ``--help`` or ``-h``
    prints ``config_help`` (with the groups the other items choose) and exits with status 0, as argparse does."""
    config_dir, overrides = Path(config_dir), list(overrides)
    base_path = config_dir / f"{entry}.yaml"
    if not base_path.is_file():
        entries = sorted(p.stem for p in config_dir.glob("*.yaml"))
        raise ConfigError(f"no config for entry point {entry!r}; expected one of: {', '.join(entries)}")
    base = _entry_file(config_dir, entry)
    defaults = base.pop("defaults", None) or {}
    groups = list(defaults.keys())
    choices, rest = _split_overrides([item for item in overrides if item not in HELP], groups)
    cfg, chosen = base, {}
    for group in groups:
        choice = choices[group] if group in choices else _default_choice(group, defaults[group], chosen)
        owner, folder = _owner_of(defaults[group], chosen), _folder_of(group, defaults[group])
        stem = choice if owner is None else _owned_choice(folder, choice, owner, config_dir)
        path = config_dir / folder / f"{stem}.yaml"
        if not path.is_file():
            known = ", ".join(available(folder, config_dir))
            raise ConfigError(f"unknown {group} {choice!r}; expected one of: {known}")
        cfg = OmegaConf.merge(cfg, OmegaConf.load(path))
        chosen[group] = stem if owner is None else stem[len(owner) + 1:]  # a method's recipe: its scale
    if any(item in HELP for item in overrides):
        try:
            print(config_help(entry, config_dir, cfg, defaults, chosen), flush=True)
        except BrokenPipeError:  # --help | head: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0)
    cfg.choices = chosen
    OmegaConf.set_struct(cfg, True)
    for item in rest:
        key, value = item.split("=", 1)
        try:
            OmegaConf.update(cfg, key, _parse_value(value), merge=True)
        except (ConfigKeyError, ConfigAttributeError) as err:
            close = difflib.get_close_matches(key, _leaf_keys(cfg), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            if key.split(".")[0] in RENAMED_GROUPS:
                hint = f"; the group is named {RENAMED_GROUPS[key.split('.')[0]]}= now"
            raise ConfigError(f"unknown config key {key!r} for {entry}{hint}") from err
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as err:
        raise ConfigError(f"config of {entry} does not resolve: {err}") from err
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        made = " ".join(f"{g}={c}" for g, c in chosen.items())
        raise ConfigError(f"config of {entry} ({made}) leaves {', '.join(missing)} unset; expected "
                          f"{'it' if len(missing) == 1 else 'them'} from the chosen groups (a method states its "
                          f"own recipe values: configs/ssl/<method>.yaml and its recipe/ files) or as key=value")
    return cfg


def config_help(entry: str, config_dir: Path, cfg: DictConfig, defaults, chosen: dict[str, str]) -> str:
    """What ``<entry point> --help`` prints: the program's usage (the first paragraph of the docstring of the
    module run as ``__main__``), its config file, its groups with their choices, and every key with its default
    under those choices (unresolved: ``${...}`` and ``???`` as the files write them)."""
    usage = (getattr(sys.modules.get("__main__"), "__doc__", None) or "").strip().split("\n\n")[0].replace("``", "")
    lines = [usage, ""] if usage else []
    lines.append(f"config: {config_dir / f'{entry}.yaml'} (its comments explain each key); an item key=value sets "
                 "a key below, group=choice picks a group's file")
    if chosen:
        lines.append(f"groups ({config_dir}/<group>/<choice>.yaml):")
    for group, choice in chosen.items():
        owner, folder = _owner_of(defaults[group], chosen), _folder_of(group, defaults[group])
        names = available(folder, config_dir) if owner is None else owned_choices(folder, owner, config_dir)
        lines.append(f"  {group}={choice}  (choices: {', '.join(names)})")
    dumper = type("HelpDumper", (yaml.SafeDumper,), {})  # the YAML the files write: sections as blocks, lists inline
    dumper.add_representer(list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
    keys = yaml.dump(OmegaConf.to_container(cfg), Dumper=dumper, sort_keys=False, width=110)
    lines += ["keys and defaults:", textwrap.indent(keys.rstrip(), "  ")]
    return "\n".join(lines)


def _entry_file(config_dir: Path, entry: str, seen: tuple[str, ...] = ()) -> DictConfig:
    """``configs/<entry>.yaml``, over the entry it names as ``base:`` when it names one (``finetune.yaml``:
    ``base: train``): the base's keys with this file's merged over them, and this file's ``defaults:``
    instead of the base's (an entry chooses its own groups)."""
    if entry in seen:
        raise ConfigError(f"configs/{entry}.yaml is its own base (through {' -> '.join(seen)}); expected a chain "
                          "of base: entries that ends")
    own = OmegaConf.load(config_dir / f"{entry}.yaml")
    parent = own.pop("base", None)
    if parent is None:
        return own
    if not (config_dir / f"{parent}.yaml").is_file():
        raise ConfigError(f"configs/{entry}.yaml names base: {parent}, which has no configs/{parent}.yaml")
    below = _entry_file(config_dir, str(parent), (*seen, entry))
    below.pop("defaults", None)
    return OmegaConf.merge(below, own)


def _owner_of(default, chosen: dict[str, str]) -> str | None:
    """The method a group's files belong to: the choice of the earlier group that ``per:`` names in its
    default's table (``per: ssl`` -> ``mae``), the name itself when it is no group (``per: supervised``),
    or None (a group of plain choices)."""
    if not (isinstance(default, DictConfig) and "per" in default):
        return None
    per = str(default["per"])
    return chosen.get(per, per)


def _folder_of(group: str, default) -> str:
    """The folder of a group's files under ``configs/``: the ``folder:`` row of its default's table, else the
    group's own name."""
    if isinstance(default, DictConfig) and "folder" in default:
        return str(default["folder"])
    return group


def owned_choices(group: str, owner: str, config_dir: Path | str = CONFIG_DIR) -> list[str]:
    """The choices of a group owned per method that belong to ``owner``: ``recipe/mae-*.yaml`` -> the
    scales ``demo``, ``paper``."""
    return [name[len(owner) + 1:] for name in available(group, Path(config_dir)) if name.startswith(f"{owner}-")]


def _owned_choice(group: str, choice: str, owner: str, config_dir: Path) -> str:
    """The file stem of ``choice`` in a group owned per method: ``<owner>-<choice>`` (``recipe=demo`` under
    ``ssl=mae`` -> ``mae-demo``); the full stem is taken too. Another owner's file is refused."""
    for stem in (f"{owner}-{choice}", choice if choice.startswith(f"{owner}-") else None):
        if stem is not None and (config_dir / group / f"{stem}.yaml").is_file():
            return stem
    raise ConfigError(f"unknown {group} {choice!r} for {owner}; expected one of: "
                      f"{', '.join(owned_choices(group, owner, config_dir)) or '(none)'} (configs/{group}/{owner}-<name>.yaml)")


def _default_choice(group: str, default, chosen: dict[str, str]) -> str:
    """A group's default: a name, or a table ``{"<earlier group>=<choice>[,<group>=<choice> ...]": name,
    otherwise: name}`` whose first row whose every term holds wins (``per`` and ``folder`` rows are no conditions)."""
    if not isinstance(default, DictConfig):
        return str(default)
    for condition, choice in default.items():
        if condition in ("per", "folder"):
            continue
        if condition == "otherwise":
            return str(choice)
        if all(_holds(group, term, chosen) for term in str(condition).split(",")):
            return str(choice)
    raise ConfigError(f"no default {group} for the choices {chosen}; name one with {group}=")


def _holds(group: str, term: str, chosen: dict[str, str]) -> bool:
    """Whether ``<earlier group>=<choice>`` (one term of a default's condition) holds."""
    other, _, value = term.strip().partition("=")
    if other not in chosen:
        raise ConfigError(f"the default of {group} depends on {other!r}, which must be a group listed before it")
    return chosen[other] == value


def load_group(group: str, choice: str, config_dir: Path | str = CONFIG_DIR) -> DictConfig:
    """One group file as it is written (``load_group("data", "default").data.n_train``)."""
    path = Path(config_dir) / group / f"{choice}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown {group} {choice!r}; expected one of: {', '.join(available(group, config_dir))}")
    return OmegaConf.load(path)


def _parse_value(text: str):
    """Parse a CLI value as YAML (numbers, booleans, lists, null), keeping plain strings as they are.

    ``nan`` and ``inf`` (YAML spells them ``.nan``, ``.inf``), alone or in a list, are read as the floats
    a user means, so a check can say "got nan" of a learning rate instead of "got 'nan'". Text that is
    no YAML value at all (``ckpt="runs/my run" random``: a quoted item, then more) is kept as it is:
    the key's own rule, or its reader, judges it."""
    try:
        value = OmegaConf.create({"v": text} if text == "" else f"v: {text}")["v"]
    except yaml.YAMLError:
        return text
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value)
    return _special_floats(value)


def _special_floats(value):
    if isinstance(value, list):
        return [_special_floats(v) for v in value]
    if isinstance(value, str) and value.strip().lower() in ("nan", "inf", "+inf", "-inf"):
        return float(value)
    return value


def save_config(cfg: DictConfig, run_dir: str | os.PathLike, name: str = "config.yaml") -> Path:
    """Write the resolved config into ``run_dir`` (atomically) and return its path."""
    text = OmegaConf.to_yaml(cfg, resolve=True)
    return atomic_write(Path(run_dir) / name, lambda tmp: Path(tmp).write_text(text))


def load_saved_config(path: str | os.PathLike) -> DictConfig:
    """Read a config written by ``save_config``, in struct mode."""
    cfg = OmegaConf.load(path)
    OmegaConf.set_struct(cfg, True)
    return cfg


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m skipless.config <entry> [key=value ...]`` prints the resolved config."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        raise SystemExit("usage: python -m skipless.config <entry> [group=choice] [key=value ...]")
    exit_on_user_error(lambda: print(OmegaConf.to_yaml(load_config(argv[0], argv[1:])), end=""))


if __name__ == "__main__":
    main()
