"""ringattn.torch.MultiheadAttention: torch.nn.MultiheadAttention whose
attention runs through the ring, on this rank's shards of the sequence.

It is a subclass of torch.nn.MultiheadAttention: the same constructor,
parameters and state_dict (in_proj_weight, or q/k/v_proj_weight with
kdim/vdim; in_proj_bias; out_proj), so that weights load from and into
the torch module both ways. forward() takes torch's arguments and maps
each onto ringattn's options or refuses it by name: key_padding_mask
when it pads a suffix of each sequence (kv_lens), attn_mask when it is
the causal mask, is_causal; need_weights=True is refused (ringattn
never forms the weights). Dropout, add_bias_kv and add_zero_attn are
refused at construction."""
import torch
import torch.nn.functional as F

from . import torch as _rt
from ._errors import refusal_of
from ._layout import unshard


def is_causal_mask(mask):
    """Whether mask, (L, L), is the causal mask as torch spells it: True
    (bool) or -inf (float) exactly above the diagonal."""
    if mask.dim() != 2 or mask.shape[0] != mask.shape[1]:
        return False
    above = torch.ones(mask.shape, dtype=torch.bool).triu(1)
    if mask.dtype == torch.bool:
        return bool((mask == above).all())
    return bool((torch.isneginf(mask) == above).all() and
                (mask[~above] == 0).all())


def _kv_lens(mask, layout, comm):
    """kv_lens (B,) of a key_padding_mask this rank holds (B, m) (True or
    -inf: padded), gathered over the ranks; ValueError unless each
    sequence's padding is a suffix."""
    pad = mask if mask.dtype == torch.bool else torch.isneginf(mask)
    full = unshard(pad.to(torch.uint8), layout, comm).bool()
    lens = (~full).sum(dim=1)
    suffix = torch.arange(full.shape[1])[None, :] >= lens[:, None]
    if not bool((full == suffix).all()):
        raise ValueError("key_padding_mask pads other keys than a suffix of "
                         "each sequence; ringattn expresses padding as "
                         "kv_lens (the keys from a length on)")
    return lens.numpy()


class MultiheadAttention(torch.nn.MultiheadAttention):
    """torch.nn.MultiheadAttention through the ring: each rank passes its
    shards of query, key and value ((L, B, E), or (B, L, E) with
    batch_first; contiguous shards by default, or the tokens of
    `layout`), and gets its rows of the output. comm: an mpi4py
    communicator (default MPI.COMM_WORLD); options: ringattn's (window,
    alibi, threads, ...). Parameter gradients are each rank's share:
    allreduce_grads before the optimizer steps."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True,
                 add_bias_kv=False, add_zero_attn=False, kdim=None,
                 vdim=None, batch_first=False, device=None, dtype=None, *,
                 comm=None, **options):
        for name, value in (("dropout", dropout), ("add_bias_kv",
                                                   add_bias_kv),
                            ("add_zero_attn", add_zero_attn)):
            if value:
                raise ValueError(f"{name}={value!r}: ringattn's "
                                 "MultiheadAttention has none; pass the "
                                 "default")
        super().__init__(embed_dim, num_heads, 0.0, bias, False, False,
                         kdim, vdim, batch_first, device, dtype)
        self.comm, self.options = comm, options

    def _projections(self):
        """The q, k and v projections' (weight, bias) pairs."""
        if self._qkv_same_embed_dim:
            ws = self.in_proj_weight.chunk(3)
        else:
            ws = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        bs = (self.in_proj_bias.chunk(3) if self.in_proj_bias is not None
              else (None,) * 3)
        return zip(ws, bs)

    def _options(self, key_padding_mask, need_weights, attn_mask,
                 is_causal):
        """ringattn's options and the rule on the global lengths of
        forward's arguments; raises what they cannot express."""
        if need_weights:
            raise ValueError("need_weights=True: ringattn never forms the "
                             "attention weights; pass need_weights=False "
                             "(the output is the same)")
        causal, size = bool(is_causal), None
        if attn_mask is not None:
            if not is_causal_mask(attn_mask):
                raise ValueError("attn_mask: ringattn takes the causal mask "
                                 "alone (True or -inf above the diagonal);"
                                 " pass is_causal=True, or window= etc. "
                                 "as options")
            causal, size = True, attn_mask.shape[0]
        opts = dict(self.options, causal=causal)
        if key_padding_mask is not None:
            opts["kv_lens"] = _kv_lens(key_padding_mask, opts.get(
                "layout", "auto"), self.comm)

        def fix(N, M, _):
            if causal and N != M:
                return (f"a causal mask with L = {N} queries and S = {M} "
                        "keys: torch aligns it top-left, ringattn "
                        "bottom-right")
            if size is not None and size != N:
                return f"attn_mask is ({size}, {size}) for L = {N} queries"
            return None
        return opts, fix

    def forward(self, query, key, value, key_padding_mask=None,
                need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        """(attn_output, None) for this rank's shards: attn_output in
        query's layout ((L, B, E), or (B, L, E) with batch_first, (L, E)
        unbatched). A float64 module projects in float64 and attends in
        float32 (q, k, v rounded at the attention's boundary)."""
        del average_attn_weights  # no weights are formed
        batched = query.dim() == 3
        if not batched:
            query, key, value = (x.unsqueeze(1) for x in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        if not self.batch_first and batched or not batched:
            query, key, value = (x.transpose(0, 1) for x in (query, key,
                                                            value))
        try:
            opts, fix = self._options(key_padding_mask, need_weights,
                                      attn_mask, is_causal)
            refusal = None
        except Exception as exc:  # agreed by the call
            opts, fix, refusal = dict(self.options), None, refusal_of(exc)
        out = self._attend(query, key, value, _rt.Spec(
            self.comm, "bnhd", opts, fix, refusal))
        if not self.batch_first or not batched:
            out = out.transpose(0, 1)
        return (out if batched else out[:, 0]), None

    def _attend(self, query, key, value, spec):
        """out_proj of the attention of the projected (B, n, E) inputs."""
        B, n, _ = query.shape
        H, D = self.num_heads, self.head_dim
        q, k, v = (F.linear(x, w, b).view(B, x.shape[1], H, -1)
                   for x, (w, b) in zip((query, key, value),
                                        self._projections()))
        wide = q.dtype == torch.float64
        if wide:
            q, k, v = q.float(), k.float(), v.float()
        o = _rt.attend(q, k, v, spec)
        o = o.double() if wide else o
        return self.out_proj(o.reshape(B, n, H * D))
