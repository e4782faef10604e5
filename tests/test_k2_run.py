"""A tiny K = 2 run of the main job: trained, measured beside a baseline, exported as a network
policy file that loads without JAX and measures as the run did, and drawn (the price heatmap)."""

import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.image
import numpy as np
import pytest

from advonline import pipeline
from advonline.cli import main

TINY_K2 = """
[setting]
resources = 2
capacities = [1.0, 1.0]
low = 1.0
high = 4.0
rounds = 8
max_demand = 0.5
demand_levels = 2

[algorithm]
price_atoms = 4
hidden = 8
layers = 1
rollout_rounds = 2
payoff_runs = 2
learning_rate = 0.003

[adversary]
density_levels = 4
hidden = 8
batch = 4

[game]
loop = "simultaneous"
temperature = 0.02
epochs = 2
replay_size = 4
replay_per_step = 1

[oracle]
epoch_steps = 1
restarts = 0
adversary_steps = 2
adversary_batch = 4
chains = 2
candidates = 4
search_steps = 2
"""


SMALL_BUDGET = ["--adversary-steps", "2", "--family-members", "3", "--random-instances", "8"]
SMALL_BUDGET += ["--search-steps", "3"]


@pytest.fixture(scope="module")
def two_resource_run(tmp_path_factory) -> Path:
    """A tiny K = 2 run of the main job (``advonline run``: trained, measured beside one
    baseline, both policies exported, figures drawn), on a small evaluation budget."""
    root = tmp_path_factory.mktemp("k2")
    config = root / "k2.toml"
    config.write_text(TINY_K2)
    folder = root / "run"
    argv = ["run", str(config), "--out", str(folder), "--quiet", "--algorithm", "greedy"]
    assert main([*argv, *SMALL_BUDGET]) == 0
    return folder


@pytest.mark.end_to_end
def test_a_two_resource_run_is_measured_exported_and_drawn(two_resource_run):
    folder = two_resource_run
    rows = (folder / "metrics.csv").read_text().splitlines()
    header, *measured = [row.split(",") for row in rows]
    assert len(measured) == 2  # one measurement after each step
    assert all(row[header.index("exploitability")] != "" for row in measured)
    report = json.loads((folder / pipeline.EVALUATION_NAME).read_text())
    assert report["setting"]["resources"] == 2
    assert "optimal_ratio_small_demand_limit" not in report["setting"]
    names = [r["algorithm"] for r in report["results"]]
    assert names == ["learned", "learned-deterministic", "greedy"]
    for result in report["results"]:
        sources = result["sources"]
        measured = [v for v in sources.values() if v is not None]
        assert result["competitive_ratio"] == max(measured) >= 1
        if result["algorithm"] == "learned":  # randomised: the grid certificate bounds it
            assert sources["exact"] is None
            assert result["upper_bound"] >= result["competitive_ratio"]
            assert "product grid" in result["upper_bound_note"]
        else:  # deterministic: the grid certificate is the CR, and no search tops it
            assert sources["exact"] == result["competitive_ratio"]
    for name, kind in (("policy.json", "randomised"), ("policy-readout.json", "deterministic")):
        document = json.loads((folder / name).read_text())
        assert document["version"] == 2 and document["kind"] == kind
    heatmap = matplotlib.image.imread(folder / "figures" / "run-price-heatmap.png")
    assert heatmap.shape[0] > 200 and heatmap.std() > 0
    assert (folder / "figures" / "learned-vs-baselines.png").is_file()


@pytest.mark.end_to_end
def test_the_evaluators_search_starts_from_the_runs_inputs_in_its_own_types(two_resource_run):
    """The run wrote inputs over 4 density levels and the evaluator writes over 64: the run's
    hardest kept inputs are written again as the evaluator's nearest types (the same
    demands, each density at most its own) and its search against the learned policies
    starts from them, not against the baselines."""
    run = pipeline.open_run(two_resource_run)
    kept = run.kept_inputs[0][: pipeline.KEPT_STARTS]
    starts = run.search_starts()
    evaluator = run.problem.encoding(run.setting)
    assert run.game.encoding != evaluator and starts.shape == kept.shape
    with jax.enable_x64(True):
        given = run.game.encoding.types.instances(jnp.asarray(kept), jnp.float64)
        written = evaluator.types.instances(jnp.asarray(starts), jnp.float64)
    np.testing.assert_array_equal(written.demands, given.demands)
    assert np.all(np.asarray(written.values) <= np.asarray(given.values) * (1 + 1e-12))
    report = json.loads((two_resource_run / pipeline.EVALUATION_NAME).read_text())
    notes = {r["algorithm"]: r["notes"]["adversary"] for r in report["results"]}
    assert f"({len(kept)} from known hard inputs)" in notes["learned"]
    assert "(0 from known hard inputs)" in notes["greedy"]


@pytest.mark.end_to_end
def test_a_two_resource_policy_file_loads_without_jax_and_measures_as_the_run(
    two_resource_run, capsys
):
    policy = two_resource_run / "policy.json"
    script = (
        "import sys, numpy as np\n"
        "from advonline.problems.posted_price.policy_file import load\n"
        f"prices = load({str(policy)!r}).prices(np.array([0.2, 0.7]), round=0)\n"
        "assert prices.shape == (2,) and np.all(np.isfinite(prices)), prices\n"
        "assert 'jax' not in sys.modules and 'jaxlib' not in sys.modules, 'jax was imported'\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr
    budget = SMALL_BUDGET
    assert (
        main(["evaluate", "--policy", str(policy), "--algorithm", "greedy", *budget, "--json"]) == 0
    )
    results = json.loads(capsys.readouterr().out)["results"]
    assert [r["algorithm"] for r in results] == ["learned", "greedy"]
    # the file is the run's network with the same float32 weights, measured by the same
    # evaluator with the same budget and seed: the same figure up to float rounding
    report = json.loads((two_resource_run / pipeline.EVALUATION_NAME).read_text())
    from_run = next(r for r in report["results"] if r["algorithm"] == "learned")
    np.testing.assert_allclose(
        results[0]["competitive_ratio"], from_run["competitive_ratio"], rtol=1e-6
    )


@pytest.mark.end_to_end
def test_a_table_export_of_several_resources_is_refused_in_one_line(two_resource_run, capsys):
    folder = two_resource_run
    target = folder.parent / "table.json"
    argv = ["export", "--checkpoint", str(folder), "--out", str(target), "--table"]
    assert main([*argv, "--no-measure"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "one resource" in error[0] and not target.exists()


CERTIFIED_K2 = """
[setting]
resources = 2
capacities = [1.0, 1.0]
low = 1.0
high = 4.0
rounds = 5
max_demand = 0.5
demand_levels = 1

[algorithm]
price_atoms = 3
hidden = 8
layers = 1
learning_rate = 0.02
shared_resources = true
grid_certificate = true

[adversary]
density_levels = 4

[game]
loop = "oracle"
epochs = 3
seed = 1

[oracle]
epoch_steps = 3
archive_size = 32
snapshots = 3
new_per_epoch = 6
restarts = 0
chains = 4
candidates = 4
search_steps = 3
probe_every = 0
certificate_instances = 8
descent_epochs = 1
descent_steps = 4
descent_learning_rate = 0.02
"""


@pytest.mark.end_to_end
def test_a_two_resource_run_trains_against_its_grid_certificate(tmp_path, optimised_compilation):
    """With ``algorithm.grid_certificate`` every epoch certifies the network over the product
    grid and draws from the strategy behind the bound: the draws are attained ratios, never
    above it, and join the archive; the last epoch's training descends the certificate and
    certifies below every epoch before it; the guarantee is the lowest certificate so far, and
    the delivered network is certified at exactly that."""
    from advonline import checkpoint, configs
    from advonline.archive import ORIGINS, instance_slots
    from advonline.problems.posted_price.grid_certify import certify_grid
    from advonline.train import train

    path = tmp_path / "certified.toml"
    path.write_text(CERTIFIED_K2)
    train(configs.load(path), tmp_path / "run")
    with open(tmp_path / "run" / "metrics.csv") as handle:
        header, *rows = [line.split(",") for line in handle.read().splitlines()]
    column = {name: [row[header.index(name)] for row in rows] for name in header}
    bounds = [float(value) if value else np.inf for value in column["upper_bound"]]
    drawn = [float(value) for value in column["certificate_ratio"]]
    guarantee = [float(value) for value in column["guarantee"]]
    assert np.isfinite(bounds[0]) and all(
        1 < d <= b * (1 + 1e-4) for d, b in zip(drawn, bounds, strict=True)
    )
    assert guarantee == pytest.approx(np.minimum.accumulate(bounds), rel=1e-6)
    assert bounds[-1] < min(bounds[:-1])
    state, config, _ = checkpoint.load(tmp_path / "run")
    origins = np.asarray(state.archive.origin)[instance_slots(state.archive)]
    assert ORIGINS.index("certificate") in set(origins.tolist())
    game = config.build_game()
    delivered = certify_grid(config.setting, game.policy(state.best_algorithm)).ratio
    assert delivered == pytest.approx(guarantee[-1], rel=1e-5)


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"resources = 2\ncapacities = [1.0, 1.0]\n": ""}, "for several resources"),
        (
            {"rounds = 5\nmax_demand = 0.5": "rounds = 60\nmax_demand = 0.05"}
            | {"price_atoms = 3": "price_atoms = 256"},
            "over the limit",
        ),
    ],
)
def test_a_grid_certificate_that_cannot_be_made_is_one_line(tmp_path, capsys, changes, said):
    text = CERTIFIED_K2
    for old, new in changes.items():
        text = text.replace(old, new)
    path = tmp_path / "refused.toml"
    path.write_text(text)
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "grid_certificate" in error[0] and said in error[0], error
    assert not (tmp_path / "run").exists()
