"""The wheel installs problems and baselines inside the advonline namespace only: a fresh
folder with nothing but the wheel imports ``advonline.problems.<name>`` and
``advonline.baselines.<name>``, and puts no top-level ``problems`` or ``baselines`` there."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_installs_problems_inside_the_namespace(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path / "wheel"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "wheel").glob("advonline-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"advonline"}
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    script = (
        "import importlib.util, advonline\n"
        "import advonline.problems.posted_price.model, advonline.problems.one_way_trading.model\n"
        "import advonline.problems.adwords.model, advonline.baselines.adwords\n"
        "import advonline.baselines.posted_price, advonline.baselines.one_way_trading\n"
        "import advonline.problems.ski_rental.model, advonline.baselines.ski_rental\n"
        "from advonline import problems\n"
        "print(advonline.__file__)\n"
        "print(sorted(problems.names()))\n"
        "print(importlib.util.find_spec('problems'), importlib.util.find_spec('baselines'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    found = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert found[0].startswith(str(target))
    assert found[1] == "['adwords', 'one-way-trading', 'posted-price', 'ski-rental']"
    assert found[2] == "None None"
