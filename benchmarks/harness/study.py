"""The entry skeleton every study shares.

A study is a package ``benchmarks/<study>/``: its ``__init__`` says what it measures and
holds ``main(argv)``, its ``__main__`` runs that, so the command is always
``python -m benchmarks.<study> [options] --out DIR``. Every study parses its options with
``parser`` (``--out`` among them), reports progress on stderr (``progress``; stdout holds
only results), and writes what it measured, with the command that measured it, as JSON
and a generated ``DIR/RESULTS.md`` (``save_json`` and ``write_results``, or the study's own
writer where its tables need more). The study's own ``RESULTS.md`` beside its code says
which runs are current.

A study whose result is one row per configuration, with a table of them, is a ``Study``:
it supplies its options, its measurement and its table, and ``Study.main`` does the rest.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

Row = dict[str, object]


def parser(prog: str, doc: str, *, out: Path | None) -> argparse.ArgumentParser:
    """``python -m <prog>``'s parser: ``doc`` (the study's docstring) as its help, and ``--out``
    (``out=None``: the study picks the default, as its docstring says)."""
    made = argparse.ArgumentParser(
        prog=f"python -m {prog}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    made.add_argument("--out", type=Path, default=out, help="where results go" + (f" ({out})" if out else ""))
    return made


def command(prog: str, argv: Sequence[str] | None) -> str:
    """The command line that ran: ``python -m <prog> <arguments>``."""
    return f"python -m {prog} " + shlex.join(sys.argv[1:] if argv is None else argv)


_STARTED = time.perf_counter()


def progress(message: str) -> None:
    """One progress line on stderr, with the seconds since the study started."""
    print(f"[{time.perf_counter() - _STARTED:6.0f}s] {message}", file=sys.stderr, flush=True)


def save_json(path: Path, run: str, **data: object) -> Path:
    """``data`` as JSON under ``meta`` (the command, torch, threads) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"command": run, "torch": torch.__version__, "threads": torch.get_num_threads()}
    path.write_text(json.dumps({"meta": meta, **data}, indent=2) + "\n")
    return path


def write_results(out: Path, title: str, run: str, body: Sequence[str], seconds: float | None = None) -> Path:
    """``out/RESULTS.md``: the title, the command (and torch, wall time), then ``body``."""
    out.mkdir(parents=True, exist_ok=True)
    wall = "" if seconds is None else f"; wall time {seconds:.0f} s"
    lines = [f"# {title}", "", f"Command: `{run}`  ", f"torch {torch.__version__}{wall}", "", *body, ""]
    path = out / "RESULTS.md"
    path.write_text("\n".join(lines))
    return path


def add_shape_arguments(made: argparse.ArgumentParser, *, layers: int, seq: int, dim: int = 128) -> None:
    """The model-shape options the HF-model studies share."""
    made.add_argument("--layers", type=int, default=layers)
    made.add_argument("--dim", type=int, default=dim)
    made.add_argument("--seq", type=int, default=seq)
    made.add_argument("--batch", type=int, default=2)
    made.add_argument("--vocab", type=int, default=512)


def per_model(run_model: Callable[[str, argparse.Namespace], list[Row]]) -> Callable[..., list[Row]]:
    """A measurement of ``--models`` one after the other (progress says which)."""

    def measure(args: argparse.Namespace) -> list[Row]:
        rows: list[Row] = []
        for number, name in enumerate(args.models, start=1):
            progress(f"[{number}/{len(args.models)}] {name}")
            rows += run_model(name, args)
        return rows

    return measure


@dataclass(frozen=True)
class Study:
    """A study measured as rows, one per configuration, and shown as one table."""

    prog: str  # "benchmarks.deep": the command is ``python -m benchmarks.deep``
    doc: str  # the study's docstring; its first line titles RESULTS.md
    arguments: Callable[[argparse.ArgumentParser], None]
    measure: Callable[[argparse.Namespace], list[Row]]
    table: Callable[[Sequence[Row]], str]
    # Why the study cannot run here (a missing extra), or None.
    unable: Callable[[argparse.Namespace], str | None] = lambda args: None

    @property
    def name(self) -> str:
        return self.prog.rsplit(".", 1)[-1]

    @property
    def out(self) -> Path:
        """The default ``--out``: the study's own ``results`` folder."""
        return Path("benchmarks", self.name, "results")

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Parse, measure, then write ``<out>/<name>.json`` and ``<out>/RESULTS.md`` and
        print the table on stdout."""
        made = parser(self.prog, self.doc, out=self.out)
        self.arguments(made)
        args = made.parse_args(argv)
        why = self.unable(args)
        if why:
            made.error(why)
        started = time.perf_counter()
        rows = self.measure(args)
        run = command(self.prog, argv)
        save_json(args.out / f"{self.name}.json", run, rows=rows)
        table = self.table(rows)
        title = self.doc.strip().splitlines()[0].rstrip(".")
        write_results(args.out, title, run, [table], time.perf_counter() - started)
        print(table)
        return 0
