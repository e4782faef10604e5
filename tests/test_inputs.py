"""Bad input at every edge gets one line and exit 2, before any work, and the tool never
writes into a folder it did not make (advonline/folders.py, advonline/preflight.py)."""

import hashlib
import json
from pathlib import Path

import pytest

from advonline import folders, preflight
from advonline.cli import main
from advonline.problems.posted_price import memory

DEFAULT_CONFIG = "experiments/configs/k1-u10-oracle.toml"  # what `make run` trains


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` with the hash of its bytes."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def one_line_exit_2(capsys, argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err


def users_folder(tmp_path: Path, name: str = "mine") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text('{"mine": true}\n')
    (folder / "evaluation.json").write_text('{"mine": true}\n')
    return folder


@pytest.mark.parametrize(
    "argv",
    [
        ["train", DEFAULT_CONFIG, "--out", "{folder}"],
        ["train", DEFAULT_CONFIG, "--out", "{folder}", "--resume"],
        ["run", DEFAULT_CONFIG, "--out", "{folder}"],
        ["plot", "{folder}", "--out", "{folder}"],
    ],
    ids=["train", "train-resume", "run", "plot"],
)
def test_no_command_writes_into_a_folder_it_did_not_make(tmp_path, capsys, argv):
    folder = users_folder(tmp_path)
    before = tree_digest(tmp_path)
    argv = [part.replace("{folder}", str(folder)) for part in argv]
    one_line_exit_2(capsys, argv, "not a folder advonline made")
    assert tree_digest(tmp_path) == before


def test_export_never_replaces_a_file_or_writes_below_one(tmp_path, capsys):
    mine = tmp_path / "policy.json"
    mine.write_text("mine\n")
    before = tree_digest(tmp_path)
    one_line_exit_2(capsys, ["export", "--checkpoint", "x", "--out", str(mine)], "exists")
    below = str(mine / "policy.json")
    one_line_exit_2(capsys, ["export", "--checkpoint", "x", "--out", below], "is a file")
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize("command", ["train", "run"])
def test_out_at_or_below_a_file_gets_one_line(tmp_path, capsys, command):
    mine = tmp_path / "notes.txt"
    mine.write_text("mine\n")
    one_line_exit_2(capsys, [command, DEFAULT_CONFIG, "--out", str(mine)], "is a file")
    below = str(mine / "run")
    one_line_exit_2(capsys, [command, DEFAULT_CONFIG, "--out", below], "is a file")
    assert mine.read_text() == "mine\n"


def test_check_writes_nothing_and_says_the_folder_is_usable(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", DEFAULT_CONFIG, "--out", str(out), "--check"]) == 0
    printed = capsys.readouterr().out
    assert "valid" in printed and "usable" in printed and "nothing written" in printed
    assert not out.exists()
    assert main(["run", DEFAULT_CONFIG, "--out", str(out), "--check"]) == 0
    assert not out.exists()


def test_a_run_stopped_before_its_first_checkpoint_restarts_either_way(tmp_path, capsys):
    """A marked folder without a checkpoint (killed early): a plain retry and --resume both
    start it again, neither sends the user to the other."""
    out = tmp_path / "run"
    folders.claim(out, "run", {"made_by": "advonline train"})
    (out / "config.json").write_text("{}\n")
    (out / "metrics.csv").write_text("step\n")
    for extra in ([], ["--resume"]):
        assert main(["train", DEFAULT_CONFIG, "--out", str(out), "--check", *extra]) == 0
        assert "usable" in capsys.readouterr().out
    one_line_exit_2(
        capsys,
        ["train", DEFAULT_CONFIG, "--out", str(tmp_path / "new"), "--resume"],
        "nothing to resume",
    )


def test_a_marked_folder_of_another_kind_is_refused(tmp_path, capsys):
    figures = tmp_path / "figures"
    folders.claim(figures, "figures", {"made_by": "advonline plot"})
    one_line_exit_2(
        capsys,
        ["train", DEFAULT_CONFIG, "--out", str(figures)],
        "an advonline figures folder",
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--setting", "rounds=10000000"], "rounds"),
        (["--family-members", "1000000000"], "lower --family-members"),
        (["--setting", "max_demand=0.00001"], "max_demand"),
        (["--setting", "resources=100", "--setting", "capacities=" + str([1] * 100)], "resources"),
        # 11^300 grid states: sizes past float's range are still compared and printed
        (["--setting", "resources=300", "--setting", "capacities=" + str([1] * 300)], "resources"),
        # grid units are int32: a finer grid is refused as the setting is read
        (["--setting", "max_demand=1e-10"], "the utilisation grid) must be at most 2147483647"),
        (["--setting", f"demand_levels={2**62}"], "must be at most 2147483647"),
    ],
)
def test_sizes_beyond_memory_are_refused_before_work(capsys, flags, message):
    one_line_exit_2(capsys, ["evaluate", "--algorithm", "greedy", *flags], message)


@pytest.mark.parametrize(
    ("problem", "setting"),
    [
        ("one-way-trading", "levels=100000000"),
        ("adwords", "queries=100000000"),
        ("posted-price", "demand_levels=20000000"),  # 2e9 grid units, within int32
        ("ski-rental", "rounds=100000000"),  # one token a season of 10^8 days
    ],
)
def test_every_problem_gets_the_memory_pre_flight(tmp_path, capsys, problem, setting):
    """A setting far too large is refused in one line, by evaluate, train and check, before
    any work (no abort, no hang, no process killed by the system, nothing allocated): a
    problem with no estimate of its own is sized by its encoding, whose sizes are known
    before it builds anything. ``check`` still reads the setting back, and marks the other
    checks skipped, not failed, naming no flag: the checks' budget is not the user's to
    lower."""
    message = "would take"
    one_line_exit_2(capsys, ["evaluate", "--problem", problem, "--setting", setting], message)
    assert main(["check", problem, "--setting", setting]) == 2
    printed = capsys.readouterr()
    assert "setting       pass" in printed.out and "FAIL" not in printed.out
    assert printed.out.count("  skip  ") == 5 and printed.out.count("as above") == 4
    assert printed.err.startswith("advonline: error: not checked") and printed.err.count("\n") == 1
    assert message in printed.out and "--" not in printed.out + printed.err
    key, value = setting.split("=")
    config = write_config(tmp_path, f'[problem]\nname = "{problem}"\n[setting]\n{key} = {value}\n')
    one_line_exit_2(capsys, ["train", config, "--out", str(tmp_path / "run")], message)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("problem", "setting", "message"),
    [
        # every season simulated day by day: a [T + 1, T] table
        ("ski-rental", "rounds=100000", "the family of every season, day by day"),
        ("ski-rental", f"buy={2**63}", "--setting buy: an integer past 64 bits"),
        # the optimal baseline's LP is dense in the grid's levels
        ("one-way-trading", "levels=100000", "the best curve's dense LP"),
    ],
)
def test_a_problem_s_own_largest_arrays_are_refused_before_work(capsys, problem, setting, message):
    """What only a problem knows it builds (a family simulated day by day, a baseline's dense
    LP) is counted too: one line and exit 2, never an out-of-memory error part way."""
    argv = ["evaluate", "--problem", problem, "--setting", setting, "--search-steps", "1"]
    one_line_exit_2(capsys, argv, message)


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[algorithm]\nhidden = 1000000000\n", "lower algorithm.hidden"),
        (
            '[game]\nloop = "simultaneous"\n[adversary]\nbatch = 100000000\n',
            "lower adversary.batch",
        ),
        (
            '[game]\nloop = "simultaneous"\n[adversary]\nlatent = 100000000\n',
            "lower adversary.latent",
        ),
        ("[algorithm]\nlearning_rate = inf\n", "finite"),
        ("[algorithm]\nlearning_rate = 1e39\n", "at most 3.4e+38 (float32)"),
        ("[game]\ntemperature = 1e300\n", "at most 3.4e+38 (float32)"),
        ('[game]\nloop = "simultaneous"\n[adversary]\nentropy = nan\n', "finite"),
        ("[game]\ntemperature = inf\n", "finite"),
        ("[game]\nepochs = 2.0\n", "whole number"),
        ("[setting]\nrounds = 2e9\n", "whole number"),
        ("[game]\nseed = 4294967296\n", "game.seed must lie in [0, 2**32)"),
        ("[oracle]\narchive_size = 8\nnew_per_epoch = 9\n", "must be <= oracle.archive_size"),
        ("[oracle]\ncertificate_instances = -1\n", "certificate_instances must be >= 0"),
        # the head's price atoms are built as the config is read, before the pre-flight
        ("[algorithm]\nprice_atoms = 1000000000\n", "price_atoms must lie in [2, 65536]"),
        (  # the probe's fresh networks write restarts x batch inputs at once
            '[problem]\nname = "one-way-trading"\n[adversary]\nhidden = 8\n'
            "[oracle]\nrestarts = 100000\n",
            "lower oracle.restarts or oracle.adversary_batch, or the setting's sizes",
        ),
        (  # the certificate's draws of an epoch are scored at once
            '[problem]\nname = "one-way-trading"\n[oracle]\ncertificate_instances = 1000000000\n',
            "or oracle.certificate_instances, or the setting's sizes",
        ),
        ("[oracle]\ncertificate_instances = 1000000000\n", "certificate's draws"),
        (  # a problem without an estimate of its own: its networks sized by tracing their init
            '[problem]\nname = "adwords"\n[algorithm]\nhidden = 1000000000\n',
            "the algorithm network's weights would take",
        ),
        (
            '[problem]\nname = "ski-rental"\n[game]\nloop = "simultaneous"\n'
            "[adversary]\nhidden = 1000000000\n",
            "the adversary network's weights would take",
        ),
        # a depth past the limit, refused before a network of it is built (each layer is
        # built in Python: a million of them would hang): posted pricing's head, another
        # problem's, the core's writer
        ("[algorithm]\nlayers = 1000000\n", "algorithm.layers must lie in [1, 64]"),
        (
            '[problem]\nname = "one-way-trading"\n[algorithm]\nlayers = 65\n',
            "[algorithm]: layers must lie in [1, 64], got 65",
        ),
        (
            '[problem]\nname = "ski-rental"\n[game]\nloop = "simultaneous"\n'
            "[adversary]\nlayers = 1000000\n",
            "adversary.layers must lie in [1, 64]",
        ),
        (  # the oracle loop's exact payoffs over 51^3 utilisation states
            "[setting]\nresources = 3\ncapacities = [1.0, 1.0, 1.0]\nmax_demand = 0.02\n"
            '[adversary]\nconditioning = "state"\n'
            '[game]\nloop = "oracle"\nepochs = 1\n[oracle]\nepoch_steps = 30\n',
            "(G + 1)^K states",
        ),
        (  # 11^300 states: a size past float's range
            f"[setting]\nresources = 300\ncapacities = {[1.0] * 300}\nmax_demand = 0.1\n"
            '[adversary]\nconditioning = "state"\n[game]\nloop = "oracle"\n',
            "would take more than 1e308 bytes",
        ),
        # TOML's integers are 64-bit: past that, the key is named and no digit repeated;
        # past Python's 4300-digit conversion limit, the reader's ValueError is one line too
        (f"[setting]\nrounds = {2**64}\n", "setting.rounds: an integer past 64 bits"),
        (f"[oracle]\nchains = [{'9' * 5000}]\n", "is not valid TOML: an integer past 64 bits"),
    ],
)
def test_configs_out_of_range_get_one_line(tmp_path, capsys, text, message):
    config = write_config(tmp_path, text)
    one_line_exit_2(capsys, ["train", config, "--out", str(tmp_path / "run")], message)
    assert not (tmp_path / "run").exists()


def test_the_shipped_configs_pass_the_memory_check():
    """No config in experiments/ is refused on a machine with 8 GB free, and the estimate
    grows with the sizes it names."""
    from advonline import configs

    for path in sorted(Path("experiments/configs").glob("*.toml")):
        preflight.check(configs.load(path).training_needs(), available=8e9)
    small = configs.from_tables({})
    large = configs.from_tables({"algorithm": {"hidden": 16384}})
    most = max(need.bytes for need in memory.training_needs(small))
    assert max(need.bytes for need in memory.training_needs(large)) > most


def test_the_evaluator_s_estimate_counts_the_adversary_s_table_where_it_runs():
    """Eight resources of half a capacity each: the fresh adversary's sale chances
    ``[T, 3^8, types]`` are 12 GB, three copies of them more than 24 GB free. Where the
    adversary is skipped for its work (10^6 grid states) they are not counted, and the other
    sources still measure."""
    from advonline.evaluation import Budget
    from advonline.problems.posted_price.model import Setting

    budget = Budget(family_members=17)
    wide = Setting(resources=8, max_demand=0.5, capacities=(1.0,) * 8)
    with pytest.raises(preflight.PreflightError, match="fresh adversary's sale chances"):
        preflight.check(memory.evaluation_needs(wide, budget), available=24e9)
    fine = Setting(resources=2, max_demand=0.001, capacities=(1.0, 1.0))
    largest, _ = preflight.check(memory.evaluation_needs(fine, budget), available=24e9)
    assert "sale chances" not in largest.what


def test_the_core_s_estimate_grows_with_the_search_and_the_writers_batch():
    """A problem sized by its encoding alone: the search's proposals are chains x candidates
    inputs of T tokens, the writer's logits batch x T x vocabulary, the random source's
    inputs random instances x T, each float64; doubling the chains, the candidates, the batch
    or the random instances doubles that need."""
    from advonline import problems as registry
    from advonline.evaluation import Budget

    problem = registry.get("one-way-trading")
    setting = problem.setting(rounds=8, levels=8)
    encoding = problem.encoding(setting)

    def needs(**fields) -> dict[str, float]:
        sizes = {"search_chains": 4, "search_candidates": 2, "adversary_batch": 8}
        budget = Budget(**(sizes | fields))
        found = preflight.encoding_evaluation_needs(problem, setting, budget)
        return {need.what.split(" [")[0]: need.bytes for need in found}

    base = needs()
    logits, proposals = "an adversary network's logits", "the search's candidate inputs"
    assert base[proposals] == 8 * 4 * 2 * encoding.length
    assert base[logits] == 8 * 8 * encoding.length * encoding.vocabulary
    assert needs(search_chains=8)[proposals] == needs(search_candidates=4)[proposals]
    assert needs(search_chains=8)[proposals] == 2 * base[proposals]
    assert needs(adversary_batch=16)[logits] == 2 * base[logits]
    drawn = "the random source's inputs"
    assert needs(random_instances=8)[drawn] == 8 * 8 * encoding.length
    assert needs(random_instances=16)[drawn] == 2 * needs(random_instances=8)[drawn]


@pytest.mark.parametrize("problem", ["one-way-trading", "ski-rental", "adwords"])
def test_a_random_set_that_cannot_fit_is_refused_before_any_work(problem, capsys):
    flags = ["--problem", problem, "--random-instances", str(10**11), "--quiet"]
    assert main(["evaluate", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "lower --random-instances" in err, err


@pytest.mark.parametrize("resources", [1, 2, 3])
def test_the_estimate_counts_the_buyer_types_the_adversary_builds(resources):
    from advonline.problems.posted_price.buyer_types import BuyerTypes
    from advonline.problems.posted_price.model import Setting

    setting = Setting(
        resources=resources, capacities=(1.0,) * resources, demand_levels=3, max_demand=0.03
    )
    for levels in (4, 64):
        assert memory.type_count(setting, levels) == BuyerTypes.build(setting, levels).count


@pytest.mark.parametrize(
    ("rows", "flags", "message"),
    [
        ("30,0.2\n", [], "outside [L, U]"),  # density 150 > U = 10
        ("0.1,0.2\n", [], "outside [L, U]"),  # density 0.5 < L = 1
        ("3,1.5\n", [], "exceeds its capacity"),
        ("3,0\n", [], "a value without a demand"),
        ("3,0.2\n", ["--setting", "rounds=5"], "--setting rounds does not apply to --instances"),
        ("3,0.2\n", ["--setting", "resources=2"], "resources=2 but the trace has 1"),
        ("3,0.2\n", ["--checkpoint", "run"], "not allowed with argument --instances"),
        ("3,0.2\n", ["--policy", "p.json"], "not allowed with argument --instances"),
        # a long cell is quoted by its start and its length, not in full
        (f"{'9' * 5000},0.2\n", [], "value=9999999999999999999999999999999999999999... (5000 "),
        (f"3,{'x' * 500}\n", [], "demand='xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (502 char"),
    ],
)
def test_traces_the_setting_does_not_allow_get_one_line(tmp_path, capsys, rows, flags, message):
    trace = tmp_path / "trace.csv"
    trace.write_text("value,demand\n" + rows)
    one_line_exit_2(capsys, ["evaluate", "--instances", str(trace), *flags], message)


def test_a_trace_with_windows_line_ends_an_empty_round_and_blank_lines_reads(tmp_path, capsys):
    """A row ``0,0`` is a round with nobody in it; a blank line (a spreadsheet's file often
    ends in some) is no round at all."""
    trace = tmp_path / "trace.csv"
    trace.write_bytes(b"value,demand\r\n2,0.2\r\n\r\n0,0\r\n5,0.8\r\n\r\n\r\n")
    assert main(["evaluate", "--instances", str(trace), "--algorithm", "greedy", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["offline_optimum"] == pytest.approx(7.0) and report["setting"]["rounds"] == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
        ('{"version": ' + "9" * 5000 + "}", "a number too long to read"),
        ("[]", "policy.json (it names no problem: read as posted-price's): posted pricing: top"),
        ('{"format": "other"}', "read as posted-price's): posted pricing: format must be"),
        ('{"setting": {"problem": "one-way-trading"}}', "policy.json: not a one-way trading"),
        (
            '{"setting": {"problem": "ski-rental"}, "provenance": "learned"}',
            "policy.json: provenance must be an object with a string algorithm",
        ),
    ],
    ids=[
        "deep",
        "long-number",
        "not-an-object",
        "another-format",
        "another-problem's-reader",
        "provenance",
    ],
)
def test_a_file_that_is_no_policy_gets_one_line_and_no_note(tmp_path, capsys, text, message):
    policy = tmp_path / "policy.json"
    policy.write_text(text)
    one_line_exit_2(capsys, ["evaluate", "--policy", str(policy)], message)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--devices", "8"], "asks for more devices than the 1 JAX sees"),
        (["--devices", "-1"], "--devices must be >= 0"),
        (["--processes", "0"], "--processes must be >= 1"),
        (["--processes", "2", "--process-id", "2"], "--process-id must lie in [0, 1]"),
        (["--coordinator", "host", "--processes", "2"], "address must be HOST:PORT"),
    ],
    ids=[
        "too-many-devices",
        "negative-devices",
        "no-processes",
        "process-id-out-of-range",
        "coordinator-without-port",
    ],
)
def test_a_device_or_process_layout_that_cannot_be_used_gets_one_line(
    tmp_path, capsys, flags, message
):
    folder = tmp_path / "run"
    commands = [["train", DEFAULT_CONFIG, "--out", str(folder)]]
    if "--devices" in flags:  # the process flags are train's alone
        commands += [["run", DEFAULT_CONFIG, "--out", str(folder)], ["evaluate"]]
    for command in commands:
        one_line_exit_2(capsys, [*command, *flags], message)
    assert not folder.exists()


def test_running_out_of_memory_part_way_is_one_line_and_keeps_the_folder(
    tmp_path, capsys, monkeypatch
):
    """Memory the estimate missed (XLA's own temporaries) ends the command with one line and
    exit 3; the run folder keeps what was written before."""
    import jax

    from advonline import cli

    def exhausted(config, folder, **kwargs):
        Path(folder).mkdir(exist_ok=True)  # the command holds its lock there
        (Path(folder) / "saved").write_text("checkpoint\n")
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 9 bytes.")

    monkeypatch.setattr(cli, "train", exhausted)
    folder = tmp_path / "run"
    argv = ["train", DEFAULT_CONFIG, "--out", str(folder), "--quiet"]
    assert main(argv) == cli.EXIT_OUT_OF_MEMORY
    err = capsys.readouterr().err  # the device line, then the error in one line
    last = err.splitlines()[-1]
    assert "Traceback" not in err and last.startswith("advonline: error: out of memory"), err
    assert "--check" in last
    assert (folder / "saved").read_text() == "checkpoint\n"


@pytest.mark.parametrize(
    "error",
    [
        MemoryError(),
        "INTERNAL: Out of memory while trying to allocate 9 bytes.",
    ],
)
def test_every_kind_of_running_out_of_memory_is_one_line(tmp_path, capsys, monkeypatch, error):
    """Python's own MemoryError and an XLA error that says so without RESOURCE_EXHAUSTED
    end the command as RESOURCE_EXHAUSTED does: one line, exit 3, never a traceback."""
    import jax

    from advonline import cli

    def exhausted(config, folder, **kwargs):
        raise jax.errors.JaxRuntimeError(error) if isinstance(error, str) else error

    monkeypatch.setattr(cli, "train", exhausted)
    argv = ["train", DEFAULT_CONFIG, "--out", str(tmp_path / "run"), "--quiet"]
    assert main(argv) == cli.EXIT_OUT_OF_MEMORY
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1].startswith("advonline: error: out of")


def test_evaluate_out_of_memory_names_the_setting_and_the_budget(capsys, monkeypatch):
    """``evaluate`` reads no config: running out of memory part-way names what its flags can
    lower, not a config's sizes."""
    from advonline import cli

    def exhausted(*args, **kwargs):
        raise MemoryError("Unable to allocate 596. GiB for an array")

    monkeypatch.setattr(cli.pipeline, "measure_policies", exhausted)
    argv = ["evaluate", "--problem", "ski-rental", "--setting", "buy=5", "--quiet"]
    assert main(argv) == cli.EXIT_OUT_OF_MEMORY
    last = capsys.readouterr().err.splitlines()[-1]
    assert "the setting's sizes or the budget (--family-members" in last and "CONFIG" not in last


def test_numbers_paths_and_folders_are_named_as_the_user_gave_them(tmp_path, capsys, monkeypatch):
    """Infinite or NaN flag values name the flag; a missing, folder, binary or endless policy
    file says which; plot on a folder that does not exist says so (not which file it lacks)."""
    monkeypatch.setattr(folders, "MAX_TEXT_BYTES", 1 << 20)  # /dev/zero is read up to it
    trace = tmp_path / "trace.csv"
    trace.write_text("value,demand\n1,0.5\n")
    binary = tmp_path / "binary.json"
    binary.write_bytes("{}".encode("utf-16"))
    greedy = ["--algorithm", "greedy"]
    for argv, message in [
        (["evaluate", "--setting", "high=inf", *greedy], "high: expected a finite number, got inf"),
        (["evaluate", "--setting", "low=inf", *greedy], "low: expected a finite number, got inf"),
        (["evaluate", "--setting", "max_demand=nan", *greedy], "max_demand: expected a finite"),
        (
            ["evaluate", "--instances", str(trace), "--setting", "capacities=[nan]", *greedy],
            "capacities: expected a finite number",
        ),
        (["evaluate", "--policy", str(tmp_path / "none.json")], "none.json: no such file"),
        (["evaluate", "--policy", str(tmp_path)], "is a folder, not a file"),
        (["evaluate", "--policy", str(binary)], "is not UTF-8 text"),
        (["evaluate", "--policy", "/dev/zero"], "/dev/zero is larger than 1 MiB"),
        (["evaluate", "--instances", str(binary)], f"trace {binary} is not UTF-8 text"),
        (["evaluate", "--instances", str(tmp_path)], f"trace {tmp_path} is a folder"),
        (["train", str(binary), "--out", str(tmp_path / "r")], f"config {binary} is not UTF-8"),
        (["train", str(tmp_path), "--out", str(tmp_path / "r")], f"config {tmp_path} is a folder"),
        (["plot", str(tmp_path / "nowhere"), "--out", str(tmp_path / "f")], "no run folder"),
    ]:
        one_line_exit_2(capsys, argv, message)
    assert not (tmp_path / "f").exists()


def test_a_setting_given_by_flags_is_refused_naming_the_keys(tmp_path, capsys):
    """What is wrong with a setting is said with the keys the user wrote it with, on the
    command line (``--setting KEY=VALUE``) as in a config file."""
    greedy = ["--algorithm", "greedy"]
    for pairs, message in [
        (["max_demand=0.3", "demand_levels=7"], "demand_levels / max_demand must"),
        (["low=5", "high=2"], "high (density U) must exceed L"),
        (["rounds=0"], "rounds must be >= 1, got 0"),
        (["max_demand=2"], "max_demand must lie in (0, 1]"),
        (["demand_levels=0"], "demand_levels must be >= 1"),
        ([f"demand_levels={10**320}"], "--setting demand_levels: an integer past 64 bits"),
        ([f"capacities=[1, {2**63}]"], "--setting capacities: an integer past 64 bits"),
        ([f"rounds={'9' * 5000}"], "--setting rounds: an integer past 64 bits"),
        # a long value or key is quoted by its start and its length
        ([f"divisible={'x' * 5000}"], "got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (5002 cha"),
        ([f"{'x' * 5000}=1"], "unknown setting keys ['xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."),
    ]:
        flags = [part for pair in pairs for part in ("--setting", pair)]
        one_line_exit_2(capsys, ["evaluate", *flags, *greedy], message)
    config = tmp_path / "grid.toml"
    config.write_text("[setting]\nmax_demand = 0.3\ndemand_levels = 7\n")
    one_line_exit_2(
        capsys,
        ["train", str(config), "--out", str(tmp_path / "run")],
        "[setting]: demand_levels / max_demand must be a whole number",
    )


@pytest.mark.end_to_end
def test_resuming_with_another_config_or_metrics_table_is_one_line_first(tmp_path, capsys):
    from tests.test_train import TINY_TOML

    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML.format(epochs=2))
    folder = tmp_path / "run"
    assert main(["train", str(config), "--out", str(folder), "--quiet"]) == 0
    capsys.readouterr()
    before = tree_digest(folder)
    config.write_text(TINY_TOML.format(epochs=4))
    argv = ["train", str(config), "--out", str(folder), "--resume"]
    one_line_exit_2(capsys, argv, "the config differs from the one")  # no banner, no bar
    assert tree_digest(folder) == before
    config.write_text(TINY_TOML.format(epochs=2))
    (folder / "metrics.csv").write_text("x,y\n1,2\n")  # not the table the run wrote
    before = tree_digest(folder)
    one_line_exit_2(capsys, argv, "metrics.csv is not a metrics table advonline wrote")
    assert tree_digest(folder) == before
    (folder / "metrics.csv").unlink()  # rows the checkpoint follows, removed by hand
    before = tree_digest(folder)
    one_line_exit_2(capsys, argv, "metrics.csv is missing or empty, but the run has a checkpoint")
    assert tree_digest(folder) == before


def test_a_path_the_system_refuses_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """A write the system refuses is named by the file it was to write (never a temporary
    one, none of which is left behind), and reaches the user as one line, exit 2."""
    target = tmp_path / "missing" / "policy.json"
    with pytest.raises(FileNotFoundError) as raised:
        folders.atomic_write(target, b"{}")
    assert raised.value.filename == str(target) and list(tmp_path.iterdir()) == []
    lock = tmp_path / "run" / folders.LOCK_NAME

    def refused(folder):
        raise IsADirectoryError(21, "Is a directory", str(lock))

    monkeypatch.setattr("advonline.pipeline.open_run", refused)
    one_line_exit_2(capsys, ["evaluate", "--checkpoint", "run"], f"{lock}: Is a directory")
