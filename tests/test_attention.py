"""models/attention.py: flex attention's block masks built without torch.compile keep packed rows apart."""

import pytest
import torch
from torch.nn.attention.flex_attention import flex_attention
from transformers import masking_utils as mu

from tinyllama_ft.models.attention import eager_block_masks, flex_block_mask


def _packed_position_ids(lengths_per_row):
    return torch.tensor([[p for n in lengths for p in range(n)] for lengths in lengths_per_row])


def _per_document_attention(q, k, v, position_ids, keep):
    """Reference: causal SDPA inside each packed document (rows restart their positions at 0), keys at
    ``keep == 0`` (padding) masked out, computed document by document."""
    out = torch.zeros_like(q)
    for b in range(q.shape[0]):
        starts = [i for i, p in enumerate(position_ids[b].tolist()) if p == 0] + [q.shape[2]]
        for s, e in zip(starts, starts[1:]):
            allowed = torch.ones(e - s, e - s, dtype=torch.bool).tril() & keep[b, None, s:e].bool()
            out[b, :, s:e] = torch.nn.functional.scaled_dot_product_attention(
                q[b : b + 1, :, s:e], k[b : b + 1, :, s:e], v[b : b + 1, :, s:e], attn_mask=allowed
            )[0]
    return out


@pytest.mark.parametrize("padded", [False, True])
def test_packed_rows_attend_only_within_their_document(padded):
    """Two rows of 300 packed tokens (documents of 7 to 170 tokens, across the 128-token blocks): flex attention
    with ``flex_block_mask`` (transformers' packed-sequence mask, built eagerly) equals causal attention inside
    each document; with a padding mask, padded keys are skipped too."""
    torch.manual_seed(0)
    position_ids = _packed_position_ids([[170, 7, 123], [60, 140, 100]])
    keep = torch.ones(position_ids.shape, dtype=torch.long)
    if padded:
        keep[1, 200:] = 0  # the last document's keys from 200 on are padding
    packed = mu.find_packed_sequence_indices(position_ids)
    assert packed is not None
    mask_function = mu.and_masks(mu.causal_mask_function, mu.packed_sequence_mask_function(packed))
    block_mask = flex_block_mask(
        2, 300, 300, mask_function=mask_function, attention_mask=keep.bool() if padded else None
    )
    q, k, v = (torch.randn(2, 4, 300, 16) for _ in range(3))
    got = flex_attention(q, k, v, block_mask=block_mask)
    want = _per_document_attention(q, k, v, position_ids, keep)
    rows = keep.bool()[:, None, :, None].expand_as(got)  # a padded query's output is not used
    torch.testing.assert_close(got[rows], want[rows], atol=1e-5, rtol=1e-5)
    # the block structure skips work: row 0's first block never reaches keys of its third document
    dense = block_mask.to_dense()[0, 0]
    assert dense.tolist() == [[1, 0, 0], [1, 1, 0], [0, 1, 1]]


def test_registered_only_for_a_model_on_flex_attention():
    """``eager_block_masks`` registers the builder for transformers' "flex_attention" masks only when the model
    uses flex attention."""
    sdpa = type("M", (), {"config": type("C", (), {"_attn_implementation": "sdpa"})()})()
    flex = type("M", (), {"config": type("C", (), {"_attn_implementation": "flex_attention"})()})()
    assert eager_block_masks(sdpa) is False
    assert eager_block_masks(flex) is True
    assert mu.ALL_MASK_ATTENTION_FUNCTIONS["flex_attention"] is flex_block_mask
