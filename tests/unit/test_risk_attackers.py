"""The strongest known attacker, its 95% intervals, the model attacker and the per-document exposure
(``dpspark.risk``), in plain numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpspark import risk
from dpspark.engine import nw_sw
from dpspark.mechanisms import Space, parse
from dpspark.stats import WorkItem, plan

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def halves(mechs, prior, runs, key=b"\x07" * 16):
    items = plan([m.spec for m in mechs], np.array(sorted(prior)), runs, 15, runs // 2)
    fit = nw_sw.counts([it for it in items if it.block == risk.FIT_HALF], key, mechs)
    score = nw_sw.counts([it for it in items if it.block == risk.SCORE_HALF], key, mechs)
    return fit, score


# --- the strongest attacker ------------------------------------------------------------------------


def test_top1_is_never_below_the_unchanged_share_of_the_same_runs(glove):
    """The issue's case: 400 words of a Zipf-like corpus, K = 20 (the default), CMP at ε = 10 and 15.
    The attacker fitted on K/2 = 10 runs falls below the identity guess (every released word is its
    own original) in some settings: the reported figure is then the identity's, so neither top-1 nor
    top-5 is ever below the unchanged share of the same scoring runs, overall or over sensitive words."""
    space = Space(glove.vectors, np.arange(2000))
    prior = {w: float(round(1000 / (w + 1)) + 1) for w in range(400)}
    sensitive = {3, 50, 120, 399}
    specs = [{"name": "laplace", "epsilon": e} for e in (10.0, 15.0)]
    specs += [{"name": "mahalanobis", "epsilon": e, "lambda": 1.0} for e in (10.0, 15.0)]
    mechs = [parse(s).build(space) for s in specs]
    fit, score = halves(mechs, prior, runs=20)
    rows = risk.reidentification(fit, score, prior, sensitive)
    below = [s for s, r in rows.items() if r["bayes_top1"] < r["unchanged"]]
    assert len(below) >= 2, "the fitted attacker alone never understates here: the test shows nothing"
    for s, r in rows.items():
        for prefix in ("", "sensitive_"):
            assert r[f"{prefix}top1"] >= r[f"{prefix}unchanged"], (s, prefix)
            assert r[f"{prefix}top5"] >= r[f"{prefix}top1"], (s, prefix)
            assert r[f"{prefix}identity_top1"] == r[f"{prefix}unchanged"]
        assert r["top1"] == max(r["bayes_top1"], r["identity_top1"])
        assert (r["top1_lo"], r["top1_hi"]) == (r[f"{r['attacker']}_top1_lo"], r[f"{r['attacker']}_top1_hi"])
    for s in below:
        assert rows[s]["attacker"] == "identity" and rows[s]["top1"] == rows[s]["unchanged"]


def test_strongest_takes_the_best_attacker_per_figure():
    row = {"unchanged": 0.5, "bayes_top1": 0.4, "bayes_top5": 0.7, "model_top1": 0.6, "model_top5": math.nan}
    row |= {f"sensitive_{k}": v for k, v in row.items()}
    row = {**row, **{f"{k}_lo": v - 0.01 for k, v in row.items()}, **{f"{k}_hi": v + 0.01 for k, v in row.items()}}
    out = risk.strongest(row)
    assert (out["top1"], out["attacker"]) == (0.6, "model") and out["top1_lo"] == pytest.approx(0.59)
    assert (out["top5"], out["attacker_top5"]) == (0.7, "bayes")  # a NaN figure takes no part
    assert out["sensitive_attacker"] == "model"
    row["model_top1"] = 0.4  # a tie goes to the earlier of ATTACKERS
    assert risk.strongest(row)["attacker"] == "identity"
    assert risk.strongest({**row, "bayes_top1": 0.5})["attacker"] == "bayes"


def test_exact_rows_have_zero_width_intervals(world):
    space, prior, sensitive = world
    mech = parse({"name": "tem", "epsilon": 3.0}).build(space)
    row = risk.exact_row(risk.exact_reidentification(mech, prior, sensitive, runs=20))
    for k in ("top1", "top5", "unchanged", "sensitive_top1"):
        assert row[f"{k}_lo"] == row[k] == row[f"{k}_hi"]
    assert row["attacker"] == "bayes" and row["top1"] >= row["unchanged"]


# --- intervals ------------------------------------------------------------------------------------


def test_interval_is_the_weighted_agresti_coull_one():
    f, h, n = np.array([3.0, 1.0]), np.array([2.0, 10.0]), np.array([10.0, 10.0])
    share, lo, hi = risk.interval(f, h, n)
    z2 = 1.959964**2
    pt = (h + z2 / 2) / (n + z2)
    half = 1.959964 * math.sqrt((f**2 * pt * (1 - pt) / n).sum()) / 4
    assert share == pytest.approx((3 * 0.2 + 1.0) / 4)
    assert (lo, hi) == pytest.approx((share - half, share + half))
    # A word hit in every run still leaves uncertainty; the interval stays within [0, 1].
    s, lo, hi = risk.interval(np.ones(1), np.array([10.0]), np.array([10.0]))
    assert s == 1 and hi == 1 and lo < 0.85
    assert all(math.isnan(x) for x in risk.interval(np.ones(1), np.array([math.nan]), np.array([10.0])))


def test_intervals_cover_the_exact_shares_of_a_closed_form_mechanism(world):
    """TEM's unchanged share is known exactly; the runs' estimate and its interval are drawn 100 times
    on independent scoring runs: the 95% interval covers the exact share in about 95% of them (at
    least 88 of 100), and an interval half as wide would not (it covers in fewer than 85)."""
    space, prior, sensitive = world
    mech = parse({"name": "tem", "epsilon": 3.0}).build(space)
    exact = risk.exact_reidentification(mech, prior, sensitive, runs=10)["unchanged"]
    words = np.array(sorted(prior))
    covered = narrow = 0
    for rep in range(100):
        score = nw_sw.counts([WorkItem(rep, 0, tuple(int(w) for w in words), 10, 1)], b"\x09" * 16, [mech])
        table = risk.word_hits(score, {})[0]
        share, lo, hi = risk.interval([prior[int(w)] for w in table["word"]], table["unchanged"], table["n"])
        covered += lo <= exact <= hi
        narrow += abs(share - exact) <= (hi - lo) / 4
    assert covered >= 88, covered
    assert narrow < 85, narrow


# --- the model attacker ---------------------------------------------------------------------------


def test_fit_beta_recovers_santext_epsilon_over_two(world):
    """SanText is exactly the model P(u|w) ∝ exp(−ε·d(w,u)/2): β fitted on its runs is ε/2."""
    space, prior, _ = world
    mech = parse({"name": "santext", "epsilon": 4.0}).build(space)
    items = plan([mech.spec], np.array(sorted(prior)), 200, 15)
    fit = {(w, u): c for (_, w, u), c in nw_sw.counts(items, b"\x05" * 16, [mech]).items()}
    assert risk.fit_beta(space, fit) == pytest.approx(2.0, rel=0.05)
    # and a wrong scale is rejected: SanText at ε = 6 fits β = 3
    mech6 = parse({"name": "santext", "epsilon": 6.0}).build(space)
    fit6 = {(w, u): c for (_, w, u), c in nw_sw.counts(items, b"\x05" * 16, [mech6]).items()}
    assert risk.fit_beta(space, fit6) == pytest.approx(3.0, rel=0.05)
    # The order the counts arrive in (the partitions', which Connect and classic Spark need not share) does
    # not move β by a bit: compare and privacy-risk publish it.
    items6, rng = list(fit6.items()), np.random.default_rng(1)
    shuffled = {risk.fit_beta(space, dict(items6[i] for i in rng.permutation(len(items6)))) for _ in range(20)}
    assert shuffled == {risk.fit_beta(space, fit6)}


def bisect_moment(dist, weight, observed, steps=60):
    """The root of Σ weight·E_β[d] = observed by plain bisection in ln β over [1e-4, 1e4] (the reference)."""

    def mean(beta):
        p = np.exp(-beta * (dist - dist.min(axis=1, keepdims=True)))
        p /= p.sum(axis=1, keepdims=True)
        return float(weight @ (p * dist).sum(axis=1))

    lo, hi = math.log(1e-4), math.log(1e4)
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean(math.exp(mid)) > observed else (lo, mid)
    return math.exp((lo + hi) / 2)


@pytest.mark.parametrize("beta", [0.01, 0.7, 3.0, 40.0, 900.0])
def test_solve_moment_finds_the_bisections_root_in_a_few_passes(beta, monkeypatch):
    """Safeguarded Newton in ln β lands on the root plain bisection finds (to 1e-9), in at most 30 passes
    over the distances where bisection takes 60; outside [1e-4, 1e4] it returns the nearer end."""
    rng = np.random.default_rng(int(beta * 100))
    dist = rng.gamma(2.0, 0.5, size=(40, 300))
    dist[np.arange(40), rng.integers(0, 300, 40)] = 0.0  # each word's own row
    weight = rng.dirichlet(np.ones(40))
    p = np.exp(-beta * (dist - dist.min(axis=1, keepdims=True)))
    p /= p.sum(axis=1, keepdims=True)
    observed = float(weight @ (p * dist).sum(axis=1))
    passes = []
    real_exp = np.exp
    monkeypatch.setattr(risk.np, "exp", lambda x, *a, **k: passes.append(1) or real_exp(x, *a, **k))
    got = risk.solve_moment(dist, weight, observed)
    monkeypatch.undo()
    assert got == pytest.approx(beta, rel=1e-9)
    assert got == pytest.approx(bisect_moment(dist, weight, observed), rel=1e-9)
    assert len(passes) <= 30, len(passes)
    assert risk.solve_moment(dist, weight, float(dist.mean()) * 2) == 1e-4  # farther than any β predicts
    assert risk.solve_moment(dist, weight, 0.0) == 1e4


def test_model_guesses_with_the_true_beta_are_the_exact_attacker(world):
    """With β = ε/2 the model attacker of SanText is the exact-likelihood attacker: its guesses rank
    prior(w)·P(u|w) as ``exact_reidentification`` does, and its runs' figures agree with the exact ones
    within their intervals."""
    space, prior, sensitive = world
    mech = parse({"name": "santext", "epsilon": 4.0}).build(space)
    model = risk.model_guesses(space, 2.0, prior)
    words = np.array(sorted(prior))
    p = mech.distribution(words)
    f = np.array([prior[int(w)] for w in words])
    for pos in (0, 7, 100, 1499):
        want = [int(words[i]) for i in sorted(range(len(words)), key=lambda i: (-f[i] * p[i, pos], words[i]))[:5]]
        assert model[(0, int(space.vocab_rows[pos]))] == want
    exact = risk.exact_reidentification(mech, prior, sensitive)
    fit, score = halves([mech], prior, runs=400)
    row = risk.reidentification(fit, score, prior, sensitive, model=model)[0]
    for k in ("top1", "top5"):
        assert row[f"model_{k}_lo"] <= exact[k] <= row[f"model_{k}_hi"], k


# --- per-document exposure ------------------------------------------------------------------------


class Sampled:
    """A closed-form mechanism seen without its closed form: ``doc_exposure`` must perturb it."""

    def __init__(self, mech) -> None:  # noqa: ANN001
        self.mech, self.space, self.vocab_rows = mech, mech.space, mech.vocab_rows

    def distribution(self, rows):  # noqa: ANN001, ANN201
        return None

    def sample_copies(self, rows, copies, rng):  # noqa: ANN001, ANN201
        return self.mech.sample_copies(rows, copies, rng)


def test_doc_exposure_known_answers(glove):
    space = Space(glove.vectors, np.arange(3000))
    row = lambda text: np.array([glove.word_index[t] for t in text.split()])  # noqa: E731
    tokens, names = row("tom went to london with tom"), row("tom london")
    # Identity-like: SanText at a huge ε releases every word as itself, so the row always shows its names.
    huge = parse({"name": "santext", "epsilon": 5000.0}).build(space)
    assert risk.doc_exposure(huge, tokens, names, 10, np.random.default_rng(0)) == (1.0, True)
    # The closed form by hand: 1 − Π_j (1 − Σ_s P(s | t_j)).
    mech = parse({"name": "tem", "epsilon": 2.0}).build(space)
    p = mech.distribution(tokens)
    pos = [int(np.flatnonzero(space.vocab_rows == s)[0]) for s in names]
    keep = 1.0
    for j in range(len(tokens)):
        keep *= 1 - p[j, pos[0]] - p[j, pos[1]]
    value, exact = risk.doc_exposure(mech, tokens, names, 10, np.random.default_rng(0))
    assert exact and value == pytest.approx(1 - keep, rel=1e-12)
    assert 0.05 < value < 0.95  # a case that tells the formula from 0 and 1
    # The sampled path (perturbing the row) estimates the same value: 400 rows × 10 runs.
    rng = np.random.default_rng(1)
    values = [risk.doc_exposure(Sampled(mech), tokens, names, 10, rng)[0] for _ in range(400)]
    share, lo, hi = risk.doc_interval(np.array(values), 10, exact=False)
    assert lo <= 1 - keep <= hi and hi - lo < 0.1
    # A sensitive word outside the vocabulary is never released.
    assert risk.doc_exposure(mech, tokens, np.array([10**6]), 10, rng) == (0.0, True)
    assert risk.doc_interval(np.array([0.2, 0.4]), 10, exact=True) == pytest.approx((0.3, 0.3, 0.3))


def test_more_fit_items_are_new_independent_draws_of_the_same_words():
    from dpspark.mechanisms import parse as p

    specs = [p({"name": "laplace", "epsilon": 5.0}), p({"name": "tem", "epsilon": 5.0})]
    items = plan(specs, np.arange(30), 20, 10, 10)
    extra = risk.more_fit_items(items, {0}, 10)
    assert {it.setting for it in extra} == {0} and {it.block for it in extra} == {risk.FIT_HALF}
    assert sorted(it.rows for it in extra) == sorted(it.rows for it in items if it.setting == 0 and it.block == 0)
    assert min(it.item for it in extra) > max(it.item for it in items) and all(it.runs == 10 for it in extra)
    twice = risk.more_fit_items(items + extra, {0}, 20)
    assert len(twice) == len(extra)  # one item per chunk, not one per earlier item


def test_each_setting_is_charged_its_own_attackers_time():
    """compare's estimate of the time left charges the exact attacker to the settings with a closed form and
    the model attacker with its doubled runs to the others; the draws every setting has are shared evenly."""
    shares = risk.cost_shares(4, {0, 2}, exact_s=10.0, fitted_s=30.0, shared_s=8.0)
    assert shares == [2 + 5, 2 + 15, 2 + 5, 2 + 15] and sum(shares) == 48.0
    assert risk.cost_shares(2, {0, 1}, 6.0, 0.0, 2.0) == [4.0, 4.0]  # no fitted setting: nothing to charge
    assert risk.cost_shares(2, set(), 0.0, 6.0, 2.0) == [4.0, 4.0]
