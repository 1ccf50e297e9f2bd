"""Fast greedy decoding on CUDA: the fused Llama decoder with a captured CUDA graph (``graph_decoder``), the
compiled static-cache decoder (``compiled_decoder``), the fused projections they read (``llama_ops``) and the
Triton one-row projection (``triton_gemv``).
"""
