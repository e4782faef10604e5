"""Property-based tests of the input edges: random configs, traces and policy documents near
and beyond every boundary. Whatever comes in, the command exits 0 with a result, or exits 2
with one line on stderr and no traceback; and it changes no file it did not make.

A small number of examples runs by default; ``pytest -m slow`` runs many more.
"""

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from advonline import checksums, configs
from advonline.cli import main
from advonline.problems import get as problem_named
from advonline.problems import names as problem_names
from advonline.problems.posted_price import policy_writer
from advonline.problems.posted_price.model import PriceDistribution, Setting, SettingError
from advonline.problems.posted_price.networks import AlgorithmNetwork
from advonline.problems.posted_price.policy_file import PolicyFileError, load
from advonline.problems.posted_price.tabulated import from_file
from tests.test_inputs import tree_digest

QUICK = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
THOROUGH = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

# values near and beyond the boundaries every field has: zero, signs, whole vs fractional,
# huge, non-finite, wrong types
NUMBERS = st.sampled_from(
    [0, 1, -1, 2, 3, 64, 2**31, 2**63 - 1, 0.0, -0.0, 0.5, 1.0, 1e-300, 1e300]
    + [math.inf, -math.inf, math.nan]
)
ODD = st.one_of(
    NUMBERS,
    st.booleans(),
    st.text(max_size=8),
    st.lists(NUMBERS, max_size=3),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_result_or_one_line(code: int, out: str, err: str) -> None:
    event(f"exit {code}")  # --hypothesis-show-statistics shows how many got through
    assert "Traceback" not in err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("advonline: error: "), err
    else:
        assert code == 0 and out.strip(), (code, err)


# ---- configs, through `advonline train CONFIG --out DIR --check` ---------------------------


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return "[" + ", ".join(toml_value(item) for item in value) + "]"


#: Each registered problem's default config, as tables.
DEFAULTS = {
    name: configs.from_tables({"problem": {"name": name}}).to_tables() for name in problem_names()
}


@st.composite
def config_texts(draw) -> str:
    """A valid config of any registered problem with one to three fields replaced by odd
    values (or an unknown key)."""
    document = DEFAULTS[draw(st.sampled_from(sorted(DEFAULTS)))]
    document = {section: dict(values) for section, values in document.items()}
    fields = [(section, key) for section, values in document.items() for key in values]
    for _ in range(draw(st.integers(1, 3))):
        section, key = draw(st.sampled_from([*fields, ("game", "unknown"), ("extra", "key")]))
        document.setdefault(section, {})[key] = draw(ODD)
    return "\n".join(
        f"[{section}]\n" + "".join(f"{key} = {toml_value(v)}\n" for key, v in values.items())
        for section, values in document.items()
    )


def config_property(text: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        config = Path(root) / "config.toml"
        config.write_text(text, encoding="utf-8")
        before = tree_digest(Path(root))
        code, out, err = run_cli(["train", str(config), "--out", f"{root}/run", "--check"])
        assert_result_or_one_line(code, out, err)
        assert tree_digest(Path(root)) == before  # --check writes nothing, not even the folder


@QUICK
@given(config_texts())
def test_any_config_is_checked_or_refused_in_one_line(text):
    config_property(text)


@pytest.mark.slow
@THOROUGH
@given(config_texts())
def test_any_config_is_checked_or_refused_in_one_line_thoroughly(text):
    config_property(text)


# ---- traces, through `advonline evaluate --instances FILE --algorithm greedy` --------------

CELLS = st.one_of(
    st.sampled_from(["0", "-0", "1e-12", "0.2", "0.5", "1", "2", "10", "1e308", "-1"]),
    st.sampled_from(["nan", "inf", "abc", "", " 0.3 ", "1,5"]),
)
HEADERS = ["value,demand", "value,demand_1,demand_2", "demand,value", "value", "value,demand,x"]


@st.composite
def plausible_rows(draw, width: int) -> list[str]:
    """A buyer the default setting allows (density in [1, 10], demands at most 1), as cells."""
    demands = draw(st.lists(st.sampled_from([0.0, 0.1, 0.25, 1.0]), min_size=1, max_size=1))
    demands = demands * max(width - 1, 1)
    value = draw(st.sampled_from([1.0, 2.5, 10.0])) * sum(demands)
    return [repr(value), *(repr(d) for d in demands)][:width]


@st.composite
def trace_bytes(draw) -> bytes:
    """A CSV trace: a header (sometimes wrong), up to 3 buyers of near-boundary cells, with or
    without a byte-order mark, with Unix or Windows line ends."""
    header = draw(st.sampled_from(HEADERS))
    width = header.count(",") + 1
    odd = st.lists(CELLS, min_size=width, max_size=width + 1)
    rows = draw(st.lists(st.one_of(plausible_rows(width), odd), min_size=0, max_size=3))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    text = end.join([header, *(",".join(row) for row in rows)]) + end
    prefix = draw(st.sampled_from([b"", b"\xef\xbb\xbf"]))
    return prefix + text.encode()


def trace_property(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as root:
        trace = Path(root) / "trace.csv"
        trace.write_bytes(content)
        argv = ["evaluate", "--instances", str(trace), "--algorithm", "greedy", "--json"]
        code, out, err = run_cli(argv)
        assert_result_or_one_line(code, out, err)
        if code == 0:
            report = json.loads(out)
            assert report["offline_optimum"] >= 0
            assert [r["algorithm"] for r in report["results"]] == ["greedy"]
        assert trace.read_bytes() == content


@QUICK
@given(trace_bytes())
@example(b"value,demand_1,demand_2\n1e308,0,1e-12\n")  # a density that overflows float64
def test_any_trace_is_measured_or_refused_in_one_line(content):
    trace_property(content)


@pytest.mark.slow
@THOROUGH
@given(trace_bytes())
def test_any_trace_is_measured_or_refused_in_one_line_thoroughly(content):
    trace_property(content)


# ---- policy documents, through the loader `evaluate --policy` uses -------------------------


def valid_documents() -> list[dict]:
    """Two resources: a network (version 2) and a table per resource (version 1)."""
    setting = Setting(resources=2, capacities=(1.0, 1.0), rounds=4, max_demand=0.25)
    network = AlgorithmNetwork(resources=2, atoms=3, hidden=4, layers=1)
    params = network.init(jax.random.key(0), jnp.zeros(2), jnp.zeros(()))
    atoms = tuple(float(a) for a in np.geomspace(setting.low, setting.high, 3))
    provenance = {"algorithm": "learned"}
    networked = policy_writer.network_document(setting, network, params, atoms, False, provenance)
    shape = (2, setting.rounds, setting.grid_size + 1, len(atoms))
    probs = np.random.default_rng(0).dirichlet(np.ones(len(atoms)), shape[:-1])
    table = PriceDistribution(np.broadcast_to(np.asarray(atoms), shape), probs)
    tabled = policy_writer.tables_document(setting, table, False, provenance)
    return [json.loads(json.dumps(document)) for document in (networked, tabled)]


VALID_DOCUMENTS = valid_documents()


def paths(node, prefix=()):
    """Every place in a JSON document: dict keys and list indices, outermost first."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from paths(value, (*prefix, key))
    elif isinstance(node, list) and node and not isinstance(node[0], int | float):
        for index, value in enumerate(node):
            yield from paths(value, (*prefix, index))


DOCUMENT_PATHS = [[path for path in paths(document) if path] for document in VALID_DOCUMENTS]


def mutated(draw, valid: dict, places: list) -> dict:
    """A copy of the ``valid`` document with one to three of its ``places`` replaced by odd
    values, or deleted."""
    document = json.loads(json.dumps(valid))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(places))
        parent = document
        try:
            for step in path[:-1]:
                parent = parent[step]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(ODD)
        except (KeyError, IndexError, TypeError):  # an earlier change removed the place
            continue
    return document


@st.composite
def policy_documents(draw) -> dict:
    """A valid posted-pricing document with one to three places changed (:func:`mutated`)."""
    which = draw(st.integers(0, len(VALID_DOCUMENTS) - 1))
    return mutated(draw, VALID_DOCUMENTS[which], DOCUMENT_PATHS[which])


def policy_property(document: dict) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "policy.json"
        # signed, as the tool writes it: the parser behind the checksum is what is under test
        path.write_text(json.dumps(checksums.signed(document)))
        try:
            loaded = load(path)
            setting, policy = from_file(loaded)
        except (PolicyFileError, SettingError) as error:
            event("refused")
            assert "\n" not in str(error) and str(error)
            return
        event("loaded")
        prices = loaded.prices(np.full(setting.resources, 0.5), round=0)
        assert prices.shape == (setting.resources,) and np.all(np.isfinite(prices))
        assert policy is not None


@QUICK
@given(policy_documents())
def test_any_policy_document_loads_or_is_refused_in_one_line(document):
    policy_property(document)


@pytest.mark.slow
@THOROUGH
@given(policy_documents())
def test_any_policy_document_loads_or_is_refused_in_one_line_thoroughly(document):
    policy_property(document)


# ---- every other problem's policy file, through `advonline evaluate --policy FILE` ---------

#: A small setting of each problem whose policy file is its own ``export``'s.
EXPORT_SETTINGS = {
    "adwords": {"advertisers": 3, "queries": 6, "max_bid": 0.25},
    "one-way-trading": {"rounds": 5, "levels": 6},
    "ski-rental": {"buy": 4, "rounds": 8},
}


def exported_documents() -> dict[str, dict]:
    """Each problem's policy file of an untrained network, as its ``export`` writes it."""
    documents = {}
    for name, table in EXPORT_SETTINGS.items():
        problem = problem_named(name)
        setting = problem.setting.from_config(table)
        head = problem.policy_head(setting, {})
        policy = head.to_policy(head.module.init(jax.random.key(0), *head.example))
        documents[name] = json.loads(json.dumps(problem.export(setting, policy)))
    return documents


EXPORTED = exported_documents()
EXPORTED_PATHS = {name: [path for path in paths(doc) if path] for name, doc in EXPORTED.items()}


@st.composite
def exported_policy_documents(draw) -> dict:
    """Another problem's valid policy file with one to three places changed."""
    name = draw(st.sampled_from(sorted(EXPORTED)))
    return mutated(draw, EXPORTED[name], EXPORTED_PATHS[name])


def exported_policy_property(document: dict) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "policy.json"
        path.write_text(json.dumps(checksums.signed(document)))
        budget = ["--search-steps", "1", "--adversary-steps", "1", "--random-instances", "2"]
        code, out, err = run_cli(["evaluate", "--policy", str(path), "--quiet", *budget])
        event(f"exit {code}")
        assert_result_or_one_line(code, out, err)


@QUICK
@given(exported_policy_documents())
@example(EXPORTED["one-way-trading"])  # unchanged: measured
def test_any_problem_s_policy_file_is_measured_or_refused_in_one_line(document):
    exported_policy_property(document)


@pytest.mark.slow
@THOROUGH
@given(exported_policy_documents())
def test_any_problem_s_policy_file_is_measured_or_refused_in_one_line_thoroughly(document):
    exported_policy_property(document)
