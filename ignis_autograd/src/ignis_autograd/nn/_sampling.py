"""Next-token sampling from logits, on the logits' device (the Gumbel-max trick)."""

from __future__ import annotations

from typing import Any

import numpy as np

import ignis
from ignis import NvArray


def sample(
    logits: NvArray, temperature: float = 1.0, top_k: int | None = None, generator: Any = None
) -> NvArray:
    """Token ids ``(batch,)`` (int64) drawn from ``softmax(logits / temperature)`` ``(batch, V)``.

    ``temperature == 0`` picks the most likely token. ``top_k`` keeps the k largest logits of
    each row (ties at the k-th value are kept); finding them reads the logits back to the host.
    Sampling adds Gumbel noise ``-log(-log(u))`` and takes the argmax, which draws exactly from
    the softmax without a cumulative sum.
    """
    if temperature < 0:
        raise ValueError(f"generate: temperature must be >= 0, got {temperature}")
    z = logits.astype("float32") if logits.dtype.name != "float32" else logits
    if top_k is not None:
        vocab = z.shape[-1]
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0:
            raise ValueError(f"generate: top_k must be a positive int, got {top_k!r}")
        if top_k < vocab:
            host = z.to_host()
            kth = -np.partition(-host, top_k - 1, axis=-1)[:, top_k - 1 : top_k]
            thresh = NvArray.from_host(kth, dtype="float32", device=z.device)
            z = ignis.where(z >= thresh, z, float("-inf"))
    if temperature == 0:
        return z.argmax(axis=-1)
    src = generator if generator is not None else ignis.random
    u = src.rand(z.shape, dtype="float32", device=z.device)
    gumbel = -ignis.log(-ignis.log(u))
    return (z * (1.0 / temperature) + gumbel).argmax(axis=-1)
