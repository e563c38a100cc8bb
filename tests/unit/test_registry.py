"""The registry is one line per mechanism (``dpspark/mechanisms/registry.py``): the package, the CLI and
the docs read it, so adding a mechanism edits no other list."""

from __future__ import annotations

import argparse

import pytest

from dpspark import cli
from dpspark.mechanisms import REGISTRY, registry

# runtime: the registry is read at import under every runtime's Python (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def test_the_registry_is_its_entries_in_order():
    assert list(REGISTRY) == list(registry.ENTRIES)
    assert all(spec.__fields__["name"].default == name for name, spec in REGISTRY.items())


def test_an_entry_whose_spec_has_another_name_is_refused(monkeypatch):
    monkeypatch.setitem(registry.ENTRIES, "tem", "santext:SanText")
    with pytest.raises(ImportError, match="santext:SanText is named 'santext'"):
        registry.load()


def test_the_command_line_offers_every_registered_mechanism():
    parser = cli.build_parser()
    perturb = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["perturb"]
    (mechanism,) = [a for a in perturb._actions if "--mechanism" in a.option_strings]
    assert mechanism.metavar == "{" + ",".join(REGISTRY) + "}"
