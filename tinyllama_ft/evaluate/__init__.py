"""Held-out checks of a model state (losses, perplexity, stop-token probability, stopping count) and the
base-vs-tuned answers side by side. Imports ``infer`` and the layers below.
"""
