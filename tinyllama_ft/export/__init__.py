"""Exports of a trained adapter: merged 16-bit, GGUF (llama.cpp's converter), the Ollama Modelfile, the Hub, and
the disk-space estimate before writing. Imports ``models`` and below, never ``train``.
"""
