"""The fitted attacker's combiners (``dpspark.engine.fitted_attack``), without a JVM: folded over any
split of the corpus words, with the fitting runs grown by ``add``, they give ``risk.reidentification``'s
figures (the reference, which reads the whole pair counts at once), bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dpspark import risk
from dpspark.engine import exact_attack as ea
from dpspark.engine import fitted_attack as fa
from dpspark.engine import nw_sw
from dpspark.mechanisms import parse
from dpspark.stats import plan

# runtime: numpy's unique, lexsort and bincount carry the figures (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

KEY = b"f" * 16


def fold_attack(items, mechs, prior, sensitive, parts, model_settings=(), seed=0):
    """The engine as a backend folds it: tasks over ``parts`` spans per setting, the guesses merged in a
    shuffled order, the hits finished per setting; the model attacker's guesses from the reference."""
    corpus = ea.Corpus.of(prior, sensitive)
    tasks = fa.tasks(items, corpus.words, parts)
    states = [
        fa.create(
            fa.items_of(t, items, corpus.words, risk.FIT_HALF),
            fa.items_of(t, items, corpus.words, risk.SCORE_HALF),
            KEY,
            mechs,
        )
        for t in tasks
    ]
    partial = [(t.setting, fa.guesses(st, mechs[t.setting].space, corpus)) for t, st in zip(tasks, states)]
    random.Random(seed).shuffle(partial)
    best: dict[int, ea.Guesses] = {}
    for s, g in partial:
        best[s] = g if s not in best else ea.merge_guesses(best[s], g)
    return corpus, tasks, states, best


def test_tasks_cover_every_word_of_every_setting_in_whole_items(world):
    space, prior, _ = world
    mechs = [parse({"name": "laplace", "epsilon": e}).build(space) for e in (5.0, 10.0)]
    words = np.array(sorted(prior))
    items = plan([parse({"name": "laplace", "epsilon": e}) for e in (5.0, 10.0)], words, 4, 2, 2)
    for parts in (1, 3, 100):
        tasks = fa.tasks(items, words, parts)
        for s in range(len(mechs)):
            mine = [t for t in tasks if t.setting == s]
            assert mine[0].lo == 0 and mine[-1].hi == len(words) and len(mine) <= parts
            assert all(a.hi == b.lo for a, b in zip(mine, mine[1:]))
            got = sorted(it.item for t in mine for b in (0, 1) for it in fa.items_of(t, items, words, b))
            assert got == sorted(it.item for it in items if it.setting == s)


@pytest.mark.parametrize("parts", [1, 2, 5])
def test_any_split_gives_the_reference_figures_with_the_model_attacker(world, parts):
    space, prior, sensitive = world
    specs = [parse({"name": "laplace", "epsilon": e}) for e in (3.0, 12.0)] + [
        parse({"name": "vickrey", "epsilon": 8.0})
    ]
    mechs = [s.build(space) for s in specs]
    items = plan(specs, np.array(sorted(prior)), 20, 2, 10)
    corpus, tasks, states, best = fold_attack(items, mechs, prior, sensitive, parts, seed=parts)
    fit = nw_sw.counts([it for it in items if it.block == risk.FIT_HALF], KEY, mechs)
    score = nw_sw.counts([it for it in items if it.block == risk.SCORE_HALF], KEY, mechs)
    betas = {s: risk.fit_beta(mechs[s].space, {(w, u): c for (t, w, u), c in fit.items() if t == s}) for s in (0, 2)}
    model_ref = {}
    for s, beta in betas.items():
        model_ref.update(risk.model_guesses(mechs[s].space, beta, prior, s))
    reference = risk.reidentification(fit, score, prior, sensitive, model=model_ref)
    words = risk.model_words(corpus.words)
    for s in range(len(specs)):
        mine = [st for t, st in zip(tasks, states) if t.setting == s]
        if s in betas:  # β from the tasks' model-word counts is the reference's β
            pairs = {}
            for st in mine:
                pairs.update(fa.model_pairs(st, words))
            assert risk.fit_beta(mechs[s].space, pairs) == betas[s]
            g = ea.create_guesses(
                ea.model_scores(mechs[s].space, betas[s], corpus), mechs[s].space, corpus, (0, len(corpus.words))
            )
            model = g.word
        else:
            model = None
        table = fa.finish_hits([fa.hits(st, mechs[s].space, best[s], model) for st in mine])
        nw = np.concatenate([fa.nw(st)[1] for st in mine])
        got = {**risk.shares(table, prior, sensitive), "nw_mean": float(nw.mean())}
        assert set(got) == set(reference[s]), s
        for k, v in reference[s].items():
            assert got[k] == v or (v != v and got[k] != got[k]), (s, k, got[k], v)


def test_added_fitting_runs_are_the_draws_of_the_grown_items(world):
    """Doubling: ``add`` of the new items equals drawing every fitting item at once, and the grown guesses
    are the reference's on the grown counts."""
    space, prior, sensitive = world
    specs = [parse({"name": "laplace", "epsilon": 6.0})]
    mechs = [s.build(space) for s in specs]
    items = plan(specs, np.array(sorted(prior)), 8, 3, 4)
    corpus, tasks, states, _ = fold_attack(items, mechs, prior, sensitive, 2)
    extra = risk.more_fit_items(items, {0}, 4)
    grown = [fa.add(st, fa.items_of(t, extra, corpus.words, risk.FIT_HALF), KEY, mechs) for t, st in zip(tasks, states)]
    everything = [it for it in items + extra if it.block == risk.FIT_HALF]
    for t, st in zip(tasks, grown):
        want = fa.draw(fa.items_of(t, everything, corpus.words, risk.FIT_HALF), KEY, mechs)
        assert all(np.array_equal(a, b) for a, b in zip(st.fit, want))
    fit = nw_sw.counts(everything, KEY, mechs)
    best = fa.guesses(grown[0], space, corpus)
    for st in grown[1:]:
        best = ea.merge_guesses(best, fa.guesses(st, space, corpus))
    want = risk.guesses(fit, prior)
    for (_, u), g in want.items():
        col = space.positions(np.array([u]))[0][0]
        assert [int(w) for w in best.word[:, col] if w >= 0] == g, u
    unseen = best.score[0] == 0
    assert unseen.sum() == space.size - len({u for (_, u) in want})


def test_an_output_never_seen_in_the_fitting_runs_is_guessed_as_itself(world):
    """A state built by hand: word a released as u (unseen in the fitting runs) and as itself."""
    space, prior, _ = world
    corpus = ea.Corpus.of(prior)
    a, b = (int(w) for w in corpus.words[:2])
    u = next(int(x) for x in space.vocab_rows if x not in (a, b))
    empty = (np.zeros(0, dtype=np.int64),) * 3
    state = fa.State(
        (np.array([b]), np.array([a]), np.array([3])),  # fitting: b came out as a three times
        (np.array([a, a]), np.array([a, u]), np.array([2, 5])),  # scoring: a as itself twice, as u five times
    )
    best = fa.guesses(state, space, corpus)
    table = fa.hits(state, space, best, None)
    assert list(table["word"]) == [a]
    # a's output a was seen (guess: b), so 0 hits there; u was never seen, guessed as itself: not a.
    assert table["n"][0] == 7 and table["unchanged"][0] == 2 and table["bayes_top1"][0] == 0
    assert np.isnan(table["model_top1"][0])
    only_a = fa.State(empty, (np.array([a]), np.array([a]), np.array([4])))
    t2 = fa.hits(only_a, space, fa.guesses(only_a, space, corpus), None)
    assert t2["bayes_top1"][0] == 4 and t2["bayes_top5"][0] == 4  # never seen: guessed as itself, a hit
