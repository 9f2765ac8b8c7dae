"""The sealed journal (PROOFS.md section 1): entries sealed into signed, chained blocks.

- :mod:`.documents`: the entry document ``E`` and block header ``B`` from the rows, and their hashes;
- :mod:`.keys`: the configured signing key and the key table;
- :mod:`.services`: :func:`~.services.journal_seal`, the one sealer;
- :mod:`.verification`: :func:`~.verification.journal_verify`, recomputing everything from the rows;
- :mod:`.selectors`: what the proof endpoints serve.
"""
