"""Training data: reading row files, checking Alpaca rows and conversations, fingerprints, Alpaca prompts (and
their Jinja form), tokenizing into ids and masks, long-row reports, the supervised-EOS check of a batch.
Imports ``machine``, ``config`` and ``models``.
"""
