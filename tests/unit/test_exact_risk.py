"""The attacker with exact likelihoods (``risk.exact_reidentification``) for closed-form mechanisms."""

from __future__ import annotations

import numpy as np
import pytest

from dpspark import risk
from dpspark.engine import nw_sw
from dpspark.mechanisms import parse
from dpspark.stats import plan

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def brute_force(mech, prior, sensitive, runs, top=risk.TOP):
    """The same figures from the full (words × V) matrix, guesses by a plain sort per output."""
    words = np.array(sorted(prior))
    f = np.array([prior[int(w)] for w in words])
    p = mech.distribution(words)
    guesses = [[int(words[i]) for i in sorted(range(len(words)), key=lambda i: (-f[i] * p[i, u], words[i]))[:top]]
               for u in range(p.shape[1])]  # fmt: skip
    pos = {int(r): i for i, r in enumerate(mech.vocab_rows)}
    out = np.zeros(8)
    for i, w in enumerate(words):
        hit1 = sum(p[i, u] for u in range(p.shape[1]) if guesses[u][0] == w)
        hit5 = sum(p[i, u] for u in range(p.shape[1]) if w in guesses[u])
        same = p[i, pos[int(w)]]
        row = f[i] * np.array([1.0, hit1, hit5, same])
        out[:4] += row
        out[4:] += row * (int(w) in sensitive)
    nw = np.mean([runs * p[i, pos[int(w)]] for i, w in enumerate(words)])
    return risk.finish(out, nw)


@pytest.mark.parametrize("name,epsilon", [("tem", 3.0), ("santext", 2.0), ("tem", 8.0)])
def test_exact_attacker_equals_the_brute_force_figures(world, name, epsilon):
    space, prior, sensitive = world
    mech = parse({"name": name, "epsilon": epsilon}).build(space)
    got = risk.exact_reidentification(mech, prior, sensitive, runs=20)
    want = brute_force(mech, prior, sensitive, runs=20)
    assert got.keys() == want.keys()
    for k in got:
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12), k
    assert 0 < got["top1"] <= got["top5"] <= 1 and 0 < got["unchanged"] < 1


def test_the_fitted_attacker_converges_to_the_exact_one(world):
    """With many runs the Monte Carlo attacker's held-out shares approach the exact ones. Its top-5 stays
    below: an output seen from fewer than five words in the fitted runs gets fewer than five guesses,
    where the exact likelihoods rank every corpus word (TEM gives every word positive probability)."""
    space, prior, sensitive = world
    mech = parse({"name": "tem", "epsilon": 3.0}).build(space)
    exact = risk.exact_reidentification(mech, prior, sensitive, runs=2)
    items = plan([mech.spec], np.array(sorted(prior)), runs=4000, words_per_item=15, runs_per_item=2000)
    fit = nw_sw.counts([it for it in items if it.block == risk.FIT_HALF], b"\x03" * 16, [mech])
    score = nw_sw.counts([it for it in items if it.block == risk.SCORE_HALF], b"\x04" * 16, [mech])
    mc = risk.reidentification(fit, score, prior, sensitive)[0]
    for k in ("top1", "unchanged"):
        assert mc[k] == pytest.approx(exact[k], abs=0.03), k
    assert exact["top1"] < mc["top5"] < exact["top5"]


def test_no_closed_form_no_exact_attacker(world):
    space, prior, _ = world
    assert risk.exact_reidentification(parse({"name": "laplace", "epsilon": 5.0}).build(space), prior) is None
