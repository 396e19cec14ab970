"""`python -m asr.bench <name> [options]`: run one benchmark (`python -m asr.bench <name> --help`
for its options)."""

import ast
import importlib
import sys
from pathlib import Path

# name -> module with main(argv) -> exit status; one module per benchmark.
BENCHMARKS = {
    "features": "asr.bench.features",
    "decode": "asr.bench.decode",
    "cluster": "asr.bench.cluster",
    "scale": "asr.bench.scale",
    "chunks": "asr.bench.chunks",
    "exchange": "asr.bench.exchange",
    "gmm": "asr.bench.gmm",
    "model": "asr.bench.model_step",
    "sweep_nodes": "asr.bench.sweep_nodes",
}


def summary(module: str) -> str:
    """The first paragraph of a benchmark's docstring, read from its source: importing it
    would import torch, seconds for a help text."""
    path = Path(__file__).resolve().parent / f"{module.rsplit('.', 1)[1]}.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def usage() -> str:
    lines = [
        f"usage: python -m asr.bench {{{','.join(sorted(BENCHMARKS))}}} [options]",
        "",
        "Benchmarks through the real entry points; results go under exp/bench/ (--out).",
        "",
    ]
    for name in sorted(BENCHMARKS):
        lines.append(f"  {name:<9} {summary(BENCHMARKS[name])}")
    lines.append("\npython -m asr.bench <name> --help lists a benchmark's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv or argv[0] not in BENCHMARKS:
        print(usage(), file=sys.stderr)
        return 2
    return importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
