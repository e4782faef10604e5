"""The core (advonline/) names no problem: no posted-price word in its code (docstrings and
comments may name examples), and no import of a problem's or a baseline's module by name (the
core reaches problems through the registry, advonline/problems). Its functions receive the
config sections they read: none reaches through a game for the run's config."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "advonline"
PROBLEMS = Path(__file__).resolve().parents[1] / "problems"
WORDS = re.compile(r"price|buyer|densit|demand|utilisation", re.IGNORECASE)
THROUGH_GAME = re.compile(r"\bgame\.config\b")
IN_A_GAME = re.compile(r"\b(game|self)\.config\b")  # inside a game's own module
PROBLEM_IMPORT = re.compile(r"^\s*(from|import)\s+advonline\.(problems|baselines)\.", re.MULTILINE)


def code_hits(path: Path) -> list[str]:
    """The posted-price words in ``path``'s code: names and strings that are not docstrings,
    with comments left out."""
    hits = []
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    for index, token in enumerate(tokens):
        if token.type == tokenize.COMMENT:
            continue
        if token.type == tokenize.STRING and _is_docstring(tokens, index):
            continue
        if token.type in (tokenize.NAME, tokenize.STRING) and WORDS.search(token.string):
            hits.append(f"{path.name}:{token.start[0]}: {token.string[:60]}")
    return hits


def _is_docstring(tokens, index: int) -> bool:
    """A string that stands alone as a statement (after a newline, an indent or nothing)."""
    before = [t for t in tokens[:index] if t.type not in (tokenize.NL, tokenize.COMMENT)]
    return not before or before[-1].type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)


def test_the_core_names_no_problem():
    hits = [hit for path in sorted(CORE.glob("*.py")) for hit in code_hits(path)]
    assert hits == []


def test_the_core_imports_no_problem_module():
    """Only the registry (advonline/problems/__init__.py, outside the core's folder) names the
    problems' modules; a core module imports none of them, nor a baseline's."""
    named = [p.name for p in sorted(CORE.glob("*.py")) if PROBLEM_IMPORT.search(p.read_text())]
    assert named == []


def test_the_check_sees_code_but_not_docstrings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Prices for buyers."""\n\n# the demand\nx = 1\ndensity = 2\n')
    assert code_hits(sample) == ["sample.py:5: density"]
    assert not PROBLEM_IMPORT.search(sample.read_text())
    sample.write_text("def f():\n    from advonline.problems.posted_price import model\n")
    assert PROBLEM_IMPORT.search(sample.read_text())


def test_no_game_holds_the_run_config():
    """``game.config.<section>`` would hand every function the whole run config: the core
    passes the section (``config.oracle``, ``config.game.temperature``) instead, and a
    problem's game holds the sections and fields it reads, not the run config."""
    games = sorted(PROBLEMS.glob("*/*game*.py")) + [CORE / "game.py"]
    games.append(PROBLEMS / "posted_price" / "training.py")
    checks = [(path, THROUGH_GAME) for path in sorted(CORE.glob("*.py"))]
    checks += [(path, IN_A_GAME) for path in games]
    hits = [
        f"{path.name}:{number}"
        for path, pattern in checks
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert {path.name for path in games} == {"game.py", "sampled_game.py", "training.py"}
    assert hits == []
    assert THROUGH_GAME.search("oracle = game.config.oracle")
    assert IN_A_GAME.search("return self.config.setting")
