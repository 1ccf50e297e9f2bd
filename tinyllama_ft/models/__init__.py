"""Models and tokenizers: loading (Unsloth or transformers), LoRA, saving and loading adapters (and the record
beside them), the demo model and GGUF sources, model families and their chat templates, precision, the pad
token rule, the attention kernel outside training. Imports ``machine`` and ``config``.
"""
