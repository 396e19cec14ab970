"""The import rule of docs/architecture.md, checked on the source: packages of `asr/` import only
packages below them (or their own), no two files import each other through any chain, and the
inference side (decode, score) and the distributed engine never import training. Imports inside
functions count as much as those at the top. The `__main__.py` entry points stand above the
library and are not counted."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ASR = Path(__file__).resolve().parents[1] / "asr"

# Bottom to top; a package may import its own modules and those of any lower layer.
LAYERS = [
    {"utils"},
    {"kaldi"},  # Kaldi's file formats: what every stage reads and writes, owned by none of them
    {"data"},
    {"text", "features", "models", "optim", "lm", "hmm", "lang"},
    {"distributed"},
    {"train"},
    {"decode", "average"},
    {"score", "transcribe", "gmm"},  # gmm decodes with decode's output writers
    {"tune"},
    {"sweep", "report"},
    {"config", "stage", "overrides"},  # the schema, the stage runner, the recipe's override check
    {"bench"},
]
LAYER = {package: level for level, packages in enumerate(LAYERS) for package in packages}


def module_name(path: Path) -> str:
    parts = path.relative_to(ASR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "asr"


def imports() -> dict[str, set[str]]:
    """module -> the asr modules it imports (resolved to existing modules)."""
    modules = {module_name(p): p for p in ASR.rglob("*.py") if p.name != "__main__.py"}
    found: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("asr"):
                names = [f"{node.module}.{a.name}" for a in node.names]
                found[module] |= {n for n in names if n in modules} or {node.module}
            elif isinstance(node, ast.Import):
                found[module] |= {a.name for a in node.names if a.name.startswith("asr")}
    return {m: {t for t in targets if t != m} for m, targets in found.items()}


def test_every_package_is_in_a_layer():
    packages = {package(module_name(p)) for p in ASR.rglob("*.py")} - {"asr"}
    assert packages <= set(LAYER), f"add {sorted(packages - set(LAYER))} to LAYERS (and docs/architecture.md)"


def test_packages_import_only_downwards():
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in imports().items()
        for target in targets
        if package(module) != package(target) and LAYER.get(package(target), 99) > LAYER.get(package(module), -1)
    )
    assert not wrong, "\n".join(wrong)


def test_inference_and_the_distributed_engine_never_import_training():
    wrong = sorted(
        f"{m} imports {t}"
        for m, ts in imports().items()
        for t in ts
        if package(m) in ("decode", "score", "distributed") and package(t) == "train"
    )
    assert not wrong, "\n".join(wrong)


def test_no_import_circle_between_files():
    graph = imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path + [module, target]
            if target not in state and (cycle := visit(target, path + [module])):
                return cycle
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module, [])):
            start = cycle.index(cycle[-1])
            raise AssertionError("import circle: " + " -> ".join(cycle[start:]))


def test_no_module_imports_another_modules_private_names():
    """`from asr.x import _name` couples a module to another's internals: a helper two modules
    need is public, in the module whose concept it is."""
    found = []
    for path in ASR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("asr"):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                found += [f"{path.relative_to(ASR.parent)}: {node.module}.{name}" for name in private]
    assert found == []
