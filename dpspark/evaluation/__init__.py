"""Evaluation of the embedding and of the vector mechanisms (``pip install dpspark[eval]``).

- ``embedding_report``: the geometry that makes ε mean what it means (``dpspark embedding-report``);
- ``privemb_eval``: PrivEmb against M1, Feyisetan & Kasiviswanathan 2021 §5 (``dpspark evaluate-vectors``).

Public data only: nothing here reads a private dataset.
"""
