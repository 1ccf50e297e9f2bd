"""Fast greedy decoding on CUDA: the fused Llama decoder with a captured CUDA graph (``graph_decoder``), the fused
projections it reads (``llama_ops``) and the Triton one-row projection (``triton_gemv``).
"""
