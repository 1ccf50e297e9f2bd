"""Training data: reading row files, checking Alpaca rows and conversations, fingerprints, Alpaca prompts (and
their Jinja form), tokenizing into ids and masks, long-row reports, the supervised-EOS check of a batch, and
``formats``: one object per ``dataset_format`` holding all that differs between Alpaca rows and conversations (what
the one run is given). Imports ``machine``, ``config`` and ``models``.
"""
