"""The budgeted allocation policy file: JSON with the setting and the learned rule's network.
Loading it needs NumPy only (no JAX), so an ad server can run the learned rule as it is.

The rule scores each advertiser with one shared network from four features (its bid on the
query over ``max_bid``, the fraction of its budget spent, the query's place ``t / T``, and
whether it bids) and splits the query by a softmax of the scores over the advertisers that bid
and have budget left.
"""

from __future__ import annotations

import numpy as np

from advonline.errors import InputError
from advonline.file_arrays import number, number_array

FORMAT = "advonline-adwords-network"


class PolicyFileError(InputError):
    """A policy file that is not a budgeted allocation network."""


def features(bids, spent, round_fraction, max_bid: float, xp=np):
    """The network's input ``[n, 4]`` for one query (``xp``: NumPy or jax.numpy)."""
    bids_on = (bids > 0).astype(spent.dtype)
    place = xp.full_like(spent, round_fraction)
    return xp.stack([bids / max_bid, spent, place, bids_on], axis=-1)


#: Budget left below which an advertiser counts as spent: sums of bids that exhaust a budget
#: exactly land within a few roundings of 1 (0.1 ten times is 0.9999999999999999 in float64,
#: 0.99999994 in float32), and a share given to such an advertiser would be lost.
SPENT_TOLERANCE = 1e-6


def eligible(bids, spent):
    """The advertisers a query may go to ``[n]``: they bid on it and have budget left (more
    than :data:`SPENT_TOLERANCE`)."""
    return (bids > 0) & (spent < 1.0 - SPENT_TOLERANCE)


def scores(layers, hidden, xp=np):
    """The network's score of each advertiser ``[n]`` from its features ``[n, 4]``: dense
    layers ``(weight, bias)`` with tanh between them."""
    for weight, bias in layers[:-1]:
        hidden = xp.tanh(hidden @ weight + bias[None])
    weight, bias = layers[-1]
    return (hidden @ weight + bias[None])[:, 0]


def split(score, allowed, xp=np):
    """A softmax of ``score`` ``[n]`` over the ``allowed`` advertisers (zeros where none is)."""
    top = xp.max(xp.where(allowed, score, -1e30))
    weights = xp.where(allowed, xp.exp(xp.where(allowed, score - top, 0.0)), 0.0)
    total = xp.sum(weights)
    return weights / xp.where(total > 0, total, 1.0)


class NumpyRule:
    """A loaded rule: ``shares(bids, spent, round_fraction) -> [n]``, NumPy only; with
    ``integral`` set, :meth:`allocate` gives each query whole to the largest share."""

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray]], max_bid: float, integral=False):
        self.layers = layers
        self.max_bid = max_bid
        self.integral = integral

    def shares(self, bids, spent, round_fraction: float) -> np.ndarray:
        bids, spent = np.asarray(bids, float), np.asarray(spent, float)
        hidden = features(bids, spent, round_fraction, self.max_bid)
        return split(scores(self.layers, hidden), eligible(bids, spent))

    def allocate(self, bids, bidders) -> np.ndarray:
        """What each advertiser earns from each query ``[T, n]``, given each query's bid ``[T]``
        and who bids ``[T, n]`` (bool)."""
        bidders = np.asarray(bidders, bool)
        spent = np.zeros(bidders.shape[1])
        earned = []
        for t, (bid, on) in enumerate(zip(bids, bidders, strict=True)):
            offered = np.where(on, bid, 0.0)
            shares = self.shares(offered, spent, t / len(bids))
            if self.integral:
                shares = np.eye(len(spent))[np.argmax(shares)] * (shares.max() > 0)
            gain = np.clip(offered * shares, 0.0, 1.0 - spent)
            spent = spent + gain
            earned.append(gain)
        return np.asarray(earned)


def load(document: dict) -> tuple[dict, NumpyRule]:
    """The setting (as described in the file) and the NumPy rule a policy file holds;
    PolicyFileError says what is wrong with one that does not."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise PolicyFileError(f"not a budgeted allocation policy file (format {FORMAT!r} expected)")
    setting = document.get("setting")
    where = "budgeted allocation policy file"
    if not isinstance(setting, dict):
        raise PolicyFileError(f"{where}: setting must be an object")
    max_bid = number(setting.get("max_bid"), f"{where}: setting.max_bid", PolicyFileError)
    if not 0 < max_bid <= 1:
        raise PolicyFileError(f"{where}: setting.max_bid must lie in (0, 1]")
    allocation = setting.get("allocation", "fractional")
    if allocation not in ("fractional", "integral"):
        raise PolicyFileError(f"{where}: setting.allocation must be fractional or integral")
    integral = allocation == "integral"
    found = document.get("layers")
    if not isinstance(found, list) or not all(isinstance(layer, dict) for layer in found):
        raise PolicyFileError(f"{where}: layers must be a list of objects")
    layers = [
        (
            number_array(layer.get("weight"), f"{where}: a layer's weight", PolicyFileError),
            number_array(layer.get("bias"), f"{where}: a layer's bias", PolicyFileError),
        )
        for layer in found
    ]
    width = 4
    for weight, bias in layers:
        if weight.ndim != 2 or weight.shape[0] != width or bias.shape != (weight.shape[1],):
            raise PolicyFileError("budgeted allocation policy file: layer shapes do not chain")
        if not (np.all(np.isfinite(weight)) and np.all(np.isfinite(bias))):
            raise PolicyFileError("budgeted allocation policy file: weights must be finite")
        width = weight.shape[1]
    if not layers or width != 1:
        raise PolicyFileError("budgeted allocation policy file: the last layer must give a score")
    return setting, NumpyRule(layers, max_bid, integral)
