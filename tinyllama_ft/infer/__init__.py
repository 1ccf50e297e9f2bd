"""Answers from a model: generation and streaming for Alpaca prompts and conversations, the try-out box; ``fast/``
holds the CUDA-graph and compiled decoders and their kernels. Imports the layers below (``data`` for prompts).
"""
