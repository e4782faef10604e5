"""Policy format version 2: the NumPy loader evaluates the stored network as the JAX module does,
for any K and both input layouts; the k1-u10 network fits in well under 1 MB; malformed network
documents get one line."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advonline import configs
from advonline.problems.posted_price import policy_writer
from advonline.problems.posted_price.learned import LearnedPolicy, LearnedPriceCurve
from advonline.problems.posted_price.model import Observation, Setting
from advonline.problems.posted_price.networks import AlgorithmNetwork
from advonline.problems.posted_price.policy_file import NetworkPolicy, PolicyFileError, parse
from advonline.problems.posted_price.tabulated import from_file, network_policy

CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"


def _network(resources: int, shared: bool, use_round: bool, key: jax.Array):
    """A pricing network with random weights in every layer (the last starts at zero, so it is
    drawn too: the loader must read every weight)."""
    network = AlgorithmNetwork(
        resources=resources,
        atoms=6,
        hidden=16,
        layers=2,
        use_round=use_round,
        shared_resources=shared,
    )
    init, last = jax.random.split(key)
    params = network.init(init, jnp.zeros(resources), jnp.zeros(()))
    kernel = params["params"]["Dense_2"]["kernel"]
    params["params"]["Dense_2"]["kernel"] = 2.0 * jax.random.normal(last, kernel.shape)
    return network, params


def _document(resources: int, shared: bool, use_round: bool, deterministic: bool = False):
    setting = Setting(resources=resources, capacities=(1.0,) * resources, rounds=20)
    network, params = _network(resources, shared, use_round, jax.random.key(resources))
    atoms = tuple(float(a) for a in np.geomspace(setting.low, setting.high, 6))
    document = policy_writer.network_document(
        setting, network, params, atoms, deterministic, provenance={"algorithm": "test"}
    )
    return json.loads(json.dumps(document)), network, params, atoms  # through JSON text


def _states(resources: int, count: int = 200):
    rng = np.random.default_rng(resources)
    utilisation = rng.random((count, resources))
    utilisation[:5] = np.round(utilisation[:5])  # corners of the box too
    rounds = rng.integers(0, 20, count)
    return utilisation, rounds


LAYOUTS = [
    (1, False, True),
    (2, True, True),
    (2, False, False),
    pytest.param(3, True, True, marks=pytest.mark.end_to_end),  # the second, on three resources
]


@pytest.mark.parametrize("resources, shared, use_round", LAYOUTS)
def test_numpy_loader_evaluates_the_network_as_jax_does(resources, shared, use_round):
    document, network, params, atoms = _document(resources, shared, use_round)
    policy = parse(document)
    utilisation, rounds = _states(resources)
    _, probs = policy.distribution(utilisation, round=rounds)  # [N, K, A]
    logits = network.apply(params, jnp.asarray(utilisation, jnp.float32), rounds / 20.0)
    expected = np.asarray(jax.nn.softmax(logits, axis=-1))
    np.testing.assert_allclose(probs, expected, atol=1e-6, rtol=0)
    assert np.abs(probs - 1 / len(atoms)).max() > 0.05  # the weights matter
    # the median read-out, and the JAX policy rebuilt from the file posts the same
    readout = LearnedPriceCurve(LearnedPolicy(params, network, atoms))
    for y, t in zip(utilisation[:20], rounds[:20], strict=True):
        observation = Observation(jnp.asarray(y, jnp.float32), jnp.float32(t / 20.0))
        posted = np.asarray(readout(observation).prices[:, 0])
        np.testing.assert_allclose(policy.prices(y, round=t), posted, rtol=1e-6)
    rebuilt = network_policy(policy)
    assert isinstance(rebuilt, LearnedPolicy)
    assert jax.tree.all(jax.tree.map(jnp.array_equal, rebuilt.params, params))


def test_several_resources_draw_one_shared_quantile():
    document, *_ = _document(2, True, True)
    policy = parse(document)
    state = np.array([0.2, 0.7])
    atoms, probs = policy.distribution(state, round=3)
    drawn = policy.sample_prices(np.tile(state, (20_000, 1)), np.random.default_rng(0), round=3)
    ranks = np.stack([np.searchsorted(atoms[k], drawn[:, k]) for k in range(2)], axis=1)
    for k in range(2):  # each resource's marginal is its own distribution
        frequency = np.bincount(ranks[:, k], minlength=atoms.shape[1]) / len(drawn)
        np.testing.assert_allclose(frequency, probs[k], atol=0.015)
    # comonotone: the quantile intervals of the two ranks overlap in every draw
    upper = np.cumsum(probs, -1)[np.arange(2), ranks]  # [N, 2]
    lower = upper - probs[np.arange(2), ranks]
    assert np.all(lower.max(axis=1) <= upper.min(axis=1) + 1e-12)
    deterministic = parse(_document(2, True, True, deterministic=True)[0])
    assert deterministic.prices(state, round=3).shape == (2,)
    with pytest.raises(ValueError, match="deterministic"):
        deterministic.distribution(state, round=3)


def test_the_k1_u10_network_file_is_under_one_megabyte():
    game = configs.load(CONFIGS / "k1-u10-simultaneous.toml").build_game()
    params = game.head.module.init(jax.random.key(0), jnp.zeros(1), jnp.zeros(()))
    params = jax.tree.map(
        lambda leaf: leaf + 0.1234567 * jnp.ones_like(leaf), params
    )  # dense digits
    document = game.network_document(params, False, provenance={})
    size = len(json.dumps(document, separators=(",", ":")))
    assert 10_000 < size < 1_000_000, size
    assert isinstance(parse(document), NetworkPolicy)


def _set(path: list, value):
    def change(document):
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


BAD_NETWORKS = {
    "inputs": (_set(["network", "inputs"], "sideways"), "network.inputs must be one of"),
    "inputs list": (_set(["network", "inputs"], ["joint"]), "network.inputs must be one of"),
    "activation": (_set(["network", "activation"], "relu"), "activation must be 'tanh'"),
    "round": (_set(["network", "round_input"], "yes"), "round_input must be true or false"),
    "atoms": (_set(["network", "price_atoms"], [3.0, 2.0]), "increasing"),
    "shape": (_set(["network", "layers", 1, "bias"], [0.0, 1.0]), "must have weights"),
    "nan": (_set(["network", "layers", 0, "bias", 0], float("nan")), "NaN"),
    "beyond float32": (_set(["network", "layers", 0, "weights", 0, 0], -1e39), "float32's range"),
    "outputs": (
        _set(["network", "layers", 2], {"weights": [[0.0] * 5] * 16, "bias": [0.0] * 5}),
        "last layer must have 6 outputs",
    ),
    "no network": (lambda d: d.pop("network"), "missing field 'network'"),
    "layers": (_set(["network", "layers"], []), "non-empty list"),
    "resources": (_set(["setting", "resources"], 1.5), "whole number"),
    "version": (_set(["version"], 3), "unsupported version 3"),
    "rounds": (_set(["setting", "rounds"], 20.0), "rounds must be a whole number"),
    "divisible": (_set(["setting", "divisible"], "no"), "divisible must be true or false"),
    "strings": (_set(["network", "price_atoms"], ["1.0", "2.0"]), "must be numbers"),
    "ragged": (_set(["network", "layers", 0, "bias"], [0.0, [1.0]]), "regular array of numbers"),
    "boolean": (_set(["network", "layers", 0, "weights", 0, 0], True), "weights must be numbers"),
    "provenance": (_set(["provenance"], ["learned"]), "provenance must be an object"),
    "algorithm": (_set(["provenance", "algorithm"], 3), "provenance.algorithm must be a string"),
}


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("colour", "blue", r"unknown setting keys \['colour'\]"),
        ("max_demand", True, "max_demand"),  # a boolean is no number, not 1.0
        ("capacities", [True, 1.0], "capacities"),
    ],
)
def test_the_setting_is_read_as_a_configs_is(key, value, message):
    document, *_ = _document(2, True, True)
    document["setting"][key] = value
    with pytest.raises(PolicyFileError, match=message) as raised:
        from_file(parse(document, "bad.json"))
    assert "\n" not in str(raised.value) and str(raised.value).startswith("bad.json: setting: ")


@pytest.mark.parametrize("case", list(BAD_NETWORKS))
def test_malformed_network_documents_are_refused_in_one_line(case):
    document, *_ = _document(2, True, True)
    change, message = BAD_NETWORKS[case]
    change(document)
    with pytest.raises(PolicyFileError, match=message) as raised:
        parse(document, "policy file bad.json")
    assert "\n" not in str(raised.value) and str(raised.value).startswith("policy file bad.json")
