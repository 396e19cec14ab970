"""`python -m asr.bench <name> [options]`: run one benchmark (see each module's --help)."""

import importlib
import sys

# name -> module with main(argv) -> exit status; one module per benchmark.
BENCHMARKS = {
    "features": "asr.bench.features",
    "decode": "asr.bench.decode",
    "cluster": "asr.bench.cluster",
    "scale": "asr.bench.scale",
    "chunks": "asr.bench.chunks",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHMARKS:
        print(f"usage: python -m asr.bench {{{','.join(sorted(BENCHMARKS))}}} [options]", file=sys.stderr)
        return 2
    return importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
