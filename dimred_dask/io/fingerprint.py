"""Content fingerprints: a digest of the array's metadata and of its chunks' bytes.

Arrays up to ``FULL_HASH_BYTES`` are hashed whole; larger ones by a fixed, evenly spaced
sample of ``SAMPLE_CHUNKS`` chunks (always the first and the last). The manifest says which.
Chunks are hashed where they are read (on the workers); only digests travel. A sparse chunk
(``scipy.sparse``, CSR row blocks) is hashed from its CSR structure: shape, dtype, indptr,
indices (sorted within each row) and data, the index arrays as int64 so the digest does not
depend on the index width a reader chose.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from .._compute import compute

FULL_HASH_BYTES = 64 * 2**20
SAMPLE_CHUNKS = 16


def _hash_block(block) -> str:
    if hasattr(block, "tocsr"):
        return _hash_sparse(block.tocsr())
    b = np.ascontiguousarray(block)
    return hashlib.blake2b(b.tobytes(), digest_size=16).hexdigest()


def _hash_sparse(x) -> str:
    if not x.has_sorted_indices:  # the same matrix gives the same digest whatever its order
        x = x.sorted_indices()
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps({"sparse": "csr", "shape": list(x.shape), "dtype": str(x.dtype)}).encode())
    for part in (
        x.indptr.astype(np.int64, copy=False),
        x.indices.astype(np.int64, copy=False),
        np.ascontiguousarray(x.data),
    ):
        h.update(np.ascontiguousarray(part).tobytes())
    return h.hexdigest()


def array_fingerprint(arr, meta: dict | None = None) -> dict:
    """A fingerprint of a dask array's content, hashed on the workers.

    Every chunk is hashed when the array holds at most `FULL_HASH_BYTES` or has at most
    `SAMPLE_CHUNKS` chunks, else an evenly spaced sample of `SAMPLE_CHUNKS` chunks (the first
    and last included): a change in a chunk outside the sample goes unseen. Sparse chunks are
    hashed from their CSR structure. The shape, dtype and chunks are folded in.

    Parameters
    ----------
    arr : dask.array.Array
        The array (dense or of sparse chunks); the hashed chunks are computed.
    meta : dict or None, default None
        JSON-able metadata folded into the digest (e.g. the source).

    Returns
    -------
    dict
        ``digest`` (32 hexadecimal digits), ``hashed`` (which chunks were hashed, in words)
        and ``chunks`` (each hashed chunk's digest by its index, to name what changed).
    """
    from dask import delayed

    blocks = arr.to_delayed().ravel()
    nbytes = arr.nbytes
    if nbytes <= FULL_HASH_BYTES or len(blocks) <= SAMPLE_CHUNKS:
        idx = np.arange(len(blocks))
        how = f"all {len(blocks)} chunks"
    else:
        idx = np.unique(np.linspace(0, len(blocks) - 1, SAMPLE_CHUNKS).round().astype(int))
        how = f"a sample of {len(idx)} of {len(blocks)} chunks (evenly spaced, first and last)"
    digests = compute(
        *[delayed(_hash_block, pure=True)(blocks[i]) for i in idx], stage="fingerprint"
    )
    h = hashlib.blake2b(digest_size=16)
    header = {
        "shape": list(arr.shape),
        "dtype": str(arr.dtype),
        "chunks": [list(c) for c in arr.chunks],
        **(meta or {}),
    }
    h.update(json.dumps(header, sort_keys=True, default=str).encode())
    for i, dg in zip(idx, digests):
        h.update(f"{i}:{dg};".encode())
    return {
        "digest": h.hexdigest(),
        "hashed": how,
        "chunks": {int(i): dg for i, dg in zip(idx, digests)},
    }


def digest_of(*parts) -> str:
    """A digest of JSON-able parts (parameters, upstream fingerprints, versions).

    Parameters
    ----------
    *parts : object
        The parts, each serialised as JSON with sorted keys (other objects as ``str``).

    Returns
    -------
    str
        32 hexadecimal digits (BLAKE2b, 16 bytes).
    """
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()
