"""RFC 6962 Merkle tree hash, audit paths and their verification (PROOFS.md section 1); no Django.

Leaves are 32-byte digests. ``leaf = SHA256(0x00 || digest)``, ``node = SHA256(0x01 || left || right)``,
and a list of n > 1 leaves splits at the largest power of two smaller than n (RFC 6962
section 2.1); the hash of the empty list is ``SHA256("")``. Audit paths are those of
RFC 6962 section 2.1.1, listed from the leaf up to the root.
"""

import hashlib

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(digest: bytes) -> bytes:
    """``SHA256(0x00 || digest)``."""
    return hashlib.sha256(b"\x00" + digest).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def tree_hash(digests: list[bytes]) -> bytes:
    """The Merkle tree hash (root) of ``digests``, in their order."""
    if not digests:
        return EMPTY_ROOT
    if len(digests) == 1:
        return leaf_hash(digests[0])
    k = _split(len(digests))
    return node_hash(tree_hash(digests[:k]), tree_hash(digests[k:]))


def audit_path(digests: list[bytes], index: int) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of ``digests``: sibling hashes from the leaf up."""
    if not 0 <= index < len(digests):
        raise IndexError(f"leaf {index} is not in a tree of {len(digests)}")
    if len(digests) == 1:
        return []
    k = _split(len(digests))
    if index < k:
        return audit_path(digests[:k], index) + [tree_hash(digests[k:])]
    return audit_path(digests[k:], index - k) + [tree_hash(digests[:k])]


def root_from_audit_path(digest: bytes, index: int, size: int, path: list[bytes]) -> bytes | None:
    """The root that ``path`` proves for leaf ``index`` of a tree of ``size`` holding ``digest``.

    ``None`` when ``index``/``size`` are impossible or ``path`` has the wrong length for them
    (RFC 9162 section 2.1.3.2's algorithm).
    """
    if not 0 <= index < size:
        return None
    fn, sn = index, size - 1
    current = leaf_hash(digest)
    for sibling in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            current = node_hash(sibling, current)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            current = node_hash(current, sibling)
        fn >>= 1
        sn >>= 1
    return current if sn == 0 else None
