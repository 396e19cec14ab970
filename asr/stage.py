"""The stage runner: every `python -m asr.<stage>` entry point is a function of the composed
config wrapped by `stage_main`, which gives it Hydra's config (conf/config.yaml with the
command line's overrides, checked against the schema), a log file, clean errors, and `--help`.

`--help` (or `-h`) is answered before Hydra runs: what the stage reads and writes, and the keys
of its own config groups with the values the command line composes and their comments in the
schema. An entry point imports its library (and torch) inside its function, so that help
takes a second, not the ten of importing torch and Hydra's own help.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import inspect
import io
import sys
import textwrap
import tokenize
from pathlib import Path
from typing import Any, Callable, Iterable

import hydra
from omegaconf import DictConfig

from asr import config
from asr.kaldi import commands as command_policy
from asr.utils.atomic import NO_SPACE, disk_full_message
from asr.utils.errors import InputError
from asr.utils.log import setup_logging
from asr.utils.memory import limit_kernel_cache
from asr.utils.stop import EXIT_PREEMPTED, Preempted, Terminated, terminate_on_signal


@contextlib.contextmanager
def mode_from_overrides():
    """Hydra 1.3's `hydra.main` composes the whole config once only to read `hydra.mode`, then
    again to run (hydra issue #3440), and every stage process would pay for both. conf/ never
    sets `hydra.mode`, so that first compose always answers None (a run); here it is asked only
    when the command line sets `hydra.mode`, and None is answered otherwise, which Hydra
    dispatches exactly as before."""
    from hydra._internal.hydra import Hydra

    composing = Hydra.get_mode

    def get_mode(self, config_name, overrides):
        if any(o.lstrip("+~").startswith("hydra.mode=") for o in overrides):
            return composing(self, config_name, overrides)
        return None

    Hydra.get_mode = get_mode
    try:
        yield
    finally:
        Hydra.get_mode = composing


def stage_main(
    stage: str, groups: Iterable[str] = (), reads: str = "", writes: str = "", uses: Iterable[str] = ()
) -> Callable[[Callable[[DictConfig], Any]], Callable[[], None]]:
    """Decorator for a stage entry point: Hydra config, logging, clean errors, `--help`.

    For the help: `groups` are the config groups the stage owns (their keys are listed),
    `uses` the other groups it reads (named only), `reads`/`writes` its inputs and outputs.

    The composed config is checked against the schema first (check_config), and oneDNN's
    kernel cache is bounded before any model runs (asr.utils.memory). `InputError` (bad
    input the user can fix), a full disk and overrides Hydra cannot compose become a clear
    message and exit status 2. SIGTERM/SIGUSR1 stop a stage with exit EXIT_PREEMPTED (75): the
    train stage after saving a checkpoint (asr.train.loop), the others at once, their atomic
    writes in progress removed (asr.utils.stop): run the same command again to go on.
    """

    def decorate(run: Callable[[DictConfig], Any]) -> Callable[[], None]:
        started = False

        @functools.wraps(run)
        def task(cfg: DictConfig) -> None:
            nonlocal started
            started = True
            log = setup_logging(stage, Path(cfg.exp_dir) / "log")
            log.info("stage %s: %s", stage, " ".join(sys.argv[1:]) or "(no overrides)")
            limit_kernel_cache()
            if stage != "train":  # training stops at a step boundary instead (asr/train/loop.py)
                terminate_on_signal()
            try:
                config.check_config(cfg)
                command_policy.configure(cfg.data.run_commands)
                run(cfg)
            except InputError as err:
                log.error("%s", err)
                sys.exit(2)
            except Preempted as stopped:
                log.warning("%s (exit %d)", stopped, EXIT_PREEMPTED)
                sys.exit(EXIT_PREEMPTED)
            except Terminated as signalled:
                log.warning(
                    "stage %s stopped by %s; nothing half-written is kept, run the same command again (exit %d)",
                    stage,
                    signalled,
                    EXIT_PREEMPTED,
                )
                sys.exit(EXIT_PREEMPTED)
            except OSError as err:
                if err.errno not in NO_SPACE:
                    raise
                log.error("%s", disk_full_message(err))
                sys.exit(2)

        def main() -> None:
            if wants_help(sys.argv[1:]):
                entry = sys.modules[run.__module__]
                usage = f"usage: python -m {entry_point(entry)} [key=value ...]  (stage {stage})"
                overrides = [a for a in sys.argv[1:] if a not in HELP]
                print(
                    usage + "\n\n" + stage_help(entry.__doc__ or "", list(groups), reads, writes, list(uses), overrides)
                )
                sys.exit(0)
            config.current_stage = stage
            try:
                with mode_from_overrides():
                    hydra.main(config_path=config.CONF_DIR, config_name="config", version_base="1.3")(task)()
            except SystemExit as end:
                # Hydra exits 1 when the overrides do not compose (an unknown key without +, a
                # bad value type, a missing config file): a user error, like InputError's 2.
                if end.code == 1 and not started:
                    sys.exit(2)
                raise

        return main

    return decorate


# --- --help ------------------------------------------------------------------------------

HELP = ("-h", "--help")
COMMON_KEYS = ("exp_name", "exp_dir", "seed", "device")  # top-level keys every stage reads


def wants_help(argv: list[str]) -> bool:
    """-h/--help anywhere on the command line (Hydra's own --hydra-help stays Hydra's)."""
    return any(arg in HELP for arg in argv)


def field_comments(schema: type) -> dict[str, str]:
    """Field name -> its comment in the dataclass' source: the one after it on its line, else
    the block of comment lines right above it, joined into one line."""
    try:
        source = textwrap.dedent(inspect.getsource(schema))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}  # line -> comment text
    own_line: set[int] = set()  # lines that hold only a comment
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
            if not token.line[: token.start[1]].strip():
                own_line.add(token.start[0])
    found = {}
    for node in ast.parse(source).body[0].body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        line = node.lineno
        if line in comments and line not in own_line:
            found[node.target.id] = comments[line]
            continue
        above, at = [], line - 1
        while at in own_line:
            above.insert(0, comments[at])
            at -= 1
        if above:
            found[node.target.id] = " ".join(above)
    return found


def _value_text(value: Any) -> str:
    """A value as one would write it in an override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else "''"
    if isinstance(value, list):
        return "[" + ",".join(_value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_value_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def config_keys(node: DictConfig, path: str) -> list[tuple[str, str, str]]:
    """(key, value, comment) of every key under `node`, nested dataclasses flattened; values
    as composed, interpolations unresolved (${exp_dir}/...)."""
    from omegaconf import OmegaConf

    schema = OmegaConf.get_type(node)
    comments = field_comments(schema) if dataclasses.is_dataclass(schema) else {}
    raw = OmegaConf.to_container(node, resolve=False)
    rows = []
    for key, value in raw.items():
        child = node._get_node(key)
        if isinstance(child, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(child)):
            rows += config_keys(child, f"{path}.{key}")
        else:
            text = "???" if OmegaConf.is_missing(node, key) else _value_text(value)
            rows.append((f"{path}.{key}" if path else str(key), text, comments.get(str(key), "")))
    return rows


def entry_point(module) -> str:
    """The name `python -m` runs `module` by: asr.text for asr/text/__main__.py."""
    spec = getattr(module, "__spec__", None)
    name = spec.name if spec is not None else module.__name__
    return name.removesuffix(".__main__")


def stage_help(doc: str, groups: list[str], reads: str, writes: str, uses: list[str], overrides: list[str]) -> str:
    """The text of a stage's --help, its values composed with the command line's overrides."""
    try:
        cfg, note = config.load_config(overrides, check=False), ""
    except Exception as err:  # a bad override: still answer, with the defaults
        cfg, note = (
            config.load_config(check=False),
            f"(the overrides do not compose: {str(err).splitlines()[0]}; defaults shown)\n",
        )
    lines = [doc.strip(), ""]
    if reads:
        lines.append(f"reads:  {reads}")
    if writes:
        lines.append(f"writes: {writes}")
    lines += [
        "",
        " ".join(["Options are Hydra overrides, key=value (e.g. exp_name=base).", note.strip()]).strip(),
        f"Its config keys ({', '.join(g + '.*' for g in groups)}), with the values this command line composes:",
    ]
    rows = [row for group in groups for row in config_keys(cfg[group], group)]
    rows += [row for row in config_keys(cfg, "") if row[0] in COMMON_KEYS]
    width = min(max(len(f"{k}={v}") for k, v, _ in rows) + 2, 48)
    for key, value, comment in rows:
        setting = f"{key}={value}"
        lines.append(f"  {setting:<{width}}  # {comment}" if comment else f"  {setting}")
    if uses:
        lines.append("")
        lines.append(
            f"It also reads the groups {', '.join(uses)} (shared with the stages that own them; "
            "see their --help). Groups are picked in conf/config.yaml, e.g. features=logmel80."
        )
    return "\n".join(lines).rstrip() + "\n"
