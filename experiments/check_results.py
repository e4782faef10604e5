"""Do the quick tables of docs/results.md still reproduce? Re-run them and report what moved.

Each experiment below prints its Markdown table (a header line, then a row per config); the
same header line heads the table it produced in docs/results.md. This script runs each one
afresh (into a temporary folder, so no stored run is reused), matches every printed row to
the row of docs/results.md under the same header with the same first cell, and compares
them cell by cell, figures exactly as printed. Columns of time (a header ending in `` s``:
machines differ) are left out. A row the document lacks, or a cell that moved, is reported;
the exit status is 1 if anything moved, so a table that no longer reproduces is found before
a reader finds it. The experiments run with XLA's default CPU emitters
(``ADVONLINE_XLA_CPU=default``, :data:`COMPUTED_WITH`), the ones these tables were computed
with (docs/results.md says which figures): training follows float rounding, and the older
emitters advonline compiles with otherwise round differently.

Run: python experiments/check_results.py [--only ski_rental] [--keep DIR]
On 2 CPU cores: about 3 min for ski rental, 9 min for one-way trading and 35 min for AdWords
(n = 10, two seeds training at a time: their figures do not depend on what trains beside).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results.md"

#: name -> the experiment's command line (its table on standard output); each takes --out
EXPERIMENTS = {
    "ski_rental": ["experiments/ski_rental.py"],
    "one_way_trading": [
        "experiments/one_way_trading.py",
        "--only",
        "owt-u10",
        "--only",
        "owt-u100",
    ],
    "adwords": ["experiments/adwords.py", "--only", "adwords-n10", "--concurrent", "2"],
}
#: The environment the tables of docs/results.md were computed in (module docstring).
COMPUTED_WITH = {"ADVONLINE_XLA_CPU": "default"}


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def tables(text: str) -> dict[str, dict[str, list[str]]]:
    """Every table of ``text``: its header line -> {first cell: the row's cells}. A header
    that heads several tables gathers all their rows."""
    found: dict[str, dict[str, list[str]]] = {}
    lines = text.splitlines()
    for index, line in enumerate(lines[:-1]):
        if not line.startswith("|") or not lines[index + 1].startswith("|---"):
            continue
        if index > 0 and lines[index - 1].startswith("|"):
            continue  # a separator row's predecessor inside a table, not a header
        rows = found.setdefault(line.strip(), {})
        for row in lines[index + 2 :]:
            if not row.startswith("|"):
                break
            rows[cells(row)[0]] = cells(row)
    return found


def compare(printed: str, document: str) -> list[str]:
    """What moved: one line per row missing from ``document`` or cell that differs there."""
    stored = tables(document)
    moved = []
    for header, rows in tables(printed).items():
        if header not in stored:
            moved.append(f"no table in docs/results.md has the header {header}")
            continue
        names = cells(header)
        for first, row in rows.items():
            if first not in stored[header]:
                moved.append(f"{first}: no such row in docs/results.md")
                continue
            before = stored[header][first]
            for name, now, then in zip(names, row, before, strict=False):
                if name.endswith(" s") or now == then:
                    continue
                moved.append(f"{first}: {name}: docs/results.md says {then}, now {now}")
    return moved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=EXPERIMENTS, help="run only these")
    parser.add_argument("--keep", metavar="DIR", help="run into DIR (kept) instead of a temp one")
    args = parser.parse_args()
    document = RESULTS.read_text()
    moved = []
    environment = {**os.environ, **COMPUTED_WITH}
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(args.keep or scratch)
        for name in args.only or EXPERIMENTS:
            command = [sys.executable, *EXPERIMENTS[name], "--out", str(out / name)]
            print(f"running {' '.join(EXPERIMENTS[name])} ...", flush=True)
            finished = subprocess.run(
                command, cwd=ROOT, env=environment, capture_output=True, text=True
            )
            if finished.returncode != 0:
                last = (finished.stderr.strip().splitlines() or ["no message"])[-1]
                moved.append(f"{name}: the experiment failed: {last}")
                continue
            print(finished.stdout.strip())
            moved += compare(finished.stdout, document)
    if moved:
        print("\n".join(["moved:", *moved]))
        return 1
    print("every figure re-measured as docs/results.md has it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
