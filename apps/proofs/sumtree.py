"""The Merkle-sum tree of customer balances (PROOFS.md section 2); standard library only, no Django.

Balances are unsigned integers of the asset's smallest unit (``b * 10**decimals``), encoded
as 16 bytes big-endian (``u128``); a negative value or one of 2**128 or more cannot be
encoded. ``leaf_id = SHA256(nonce || user_id as 8 bytes big-endian)``;
``leaf = SHA256(0x00 || leaf_id || u128(b_1) || ... || u128(b_k))``; a node hashes both
children's hashes and sums, ``SHA256(0x01 || left_hash || u128(left_sums) || right_hash ||
u128(right_sums))``, with ``sums = left_sums + right_sums`` below 2**128 per asset.

Leaves are ordered by leaf id and the tree splits as RFC 6962 does. Built bottom-up, that
tree is the one where each level pairs neighbours and a last node without a partner moves
up unchanged; :func:`levels` builds it that way, one level at a time, so a caller can store
each level and let it go. Level 0 holds the leaves; the last level holds the root.
"""

import hashlib
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

U128_LIMIT = 2**128


class TreeError(ValueError):
    """A tree that cannot be built: a duplicate user, a negative balance, a sum of 2**128 or more."""


def u128(units: int) -> bytes:
    """``units`` as 16 bytes big-endian; :class:`TreeError` unless ``0 <= units < 2**128``."""
    if not 0 <= units < U128_LIMIT:
        raise TreeError(f"{units} is not an unsigned 128-bit amount")
    return units.to_bytes(16, "big")


def encode_sums(sums: Sequence[int]) -> bytes:
    """``u128(s_1) || ... || u128(s_k)``; :class:`TreeError` unless every value is in ``0 .. 2**128 - 1``."""
    try:
        return b"".join([value.to_bytes(16, "big") for value in sums])
    except OverflowError:  # negative, or 2**128 and more
        raise TreeError(f"{list(sums)} are not all unsigned 128-bit amounts") from None


def leaf_id(nonce: bytes, user_id: int) -> bytes:
    """``SHA256(nonce || user_id as 8 bytes big-endian)``."""
    return hashlib.sha256(nonce + user_id.to_bytes(8, "big")).digest()


def leaf_hash(identifier: bytes, encoded_balances: bytes) -> bytes:
    """``SHA256(0x00 || leaf_id || u128(b_1) || ... || u128(b_k))`` from the encoded balances."""
    return hashlib.sha256(b"\x00" + identifier + encoded_balances).digest()


def node_hash(left_hash: bytes, left_sums: bytes, right_hash: bytes, right_sums: bytes) -> bytes:
    """``SHA256(0x01 || left_hash || u128(left_sums...) || right_hash || u128(right_sums...))``."""
    return hashlib.sha256(b"\x01" + left_hash + left_sums + right_hash + right_sums).digest()


def add_sums(left: Sequence[int], right: Sequence[int]) -> tuple[int, ...]:
    """Per-asset sums of two children; :class:`TreeError` when one reaches 2**128."""
    sums = tuple(map(operator.add, left, right))
    if len(sums) != len(left) or len(left) != len(right):
        raise TreeError("children with different numbers of assets")
    if max(sums, default=0) >= U128_LIMIT:
        raise TreeError("a node's sum reaches 2**128")
    return sums


class Leaf(NamedTuple):
    """One user's leaf: ``balances`` in smallest units, in the snapshot's asset order; ``nonce`` 32 bytes."""

    user_id: int
    nonce: bytes
    balances: tuple[int, ...]


@dataclass
class Level:
    """One level of the tree: node ``i`` is ``hashes[i]`` with per-asset ``sums[i]`` (``encoded[i]`` as u128s)."""

    hashes: list[bytes]
    sums: list[tuple[int, ...]]
    encoded: list[bytes]

    def __len__(self) -> int:
        return len(self.hashes)


class OrderedLeaves(NamedTuple):
    """Leaves in leaf-id order, with their leaf ids (computed once)."""

    ids: list[bytes]
    leaves: list[Leaf]


def leaves_ordered(leaves: Sequence[Leaf]) -> OrderedLeaves:
    """``leaves`` sorted by leaf id. Raises :class:`TreeError` for two leaves of one user or a nonce
    that is not 32 bytes: a user counted twice could hide a balance behind the other leaf."""
    seen: set[int] = set()
    for leaf in leaves:
        if leaf.user_id in seen:
            raise TreeError(f"user {leaf.user_id} has two leaves")
        if len(leaf.nonce) != 32:
            raise TreeError(f"user {leaf.user_id}'s nonce is not 32 bytes")
        seen.add(leaf.user_id)
    keyed = sorted((leaf_id(leaf.nonce, leaf.user_id), leaf) for leaf in leaves)
    return OrderedLeaves([identifier for identifier, _ in keyed], [leaf for _, leaf in keyed])


def leaf_level(ordered: OrderedLeaves) -> Level:
    """Level 0 of leaves in leaf-id order (see :func:`leaves_ordered`); negative balances raise."""
    encoded = [encode_sums(leaf.balances) for leaf in ordered.leaves]
    hashes = [leaf_hash(identifier, balances) for identifier, balances in zip(ordered.ids, encoded, strict=True)]
    return Level(hashes, [leaf.balances for leaf in ordered.leaves], encoded)


def parent_level(level: Level) -> Level:
    """The level above ``level``: neighbours paired, a last node without a partner moved up unchanged."""
    hashes, sums, encoded = [], [], []
    count = len(level)
    for i in range(0, count - 1, 2):
        total = add_sums(level.sums[i], level.sums[i + 1])
        hashes.append(node_hash(level.hashes[i], level.encoded[i], level.hashes[i + 1], level.encoded[i + 1]))
        sums.append(total)
        encoded.append(encode_sums(total))
    if count % 2:
        hashes.append(level.hashes[-1])
        sums.append(level.sums[-1])
        encoded.append(level.encoded[-1])
    return Level(hashes, sums, encoded)


def levels(first: Level) -> Iterator[Level]:
    """``first`` and every level above it up to the root (a level of one node); nothing for an empty tree."""
    level = first
    while len(level):
        yield level
        if len(level) == 1:
            return
        level = parent_level(level)


def level_sizes(leaf_count: int) -> list[int]:
    """How many nodes each level holds, from the leaves (level 0) to the root."""
    sizes = [leaf_count] if leaf_count else []
    while sizes and sizes[-1] > 1:
        sizes.append((sizes[-1] + 1) // 2)
    return sizes


def path_steps(position: int, leaf_count: int) -> list[tuple[int, int, str]]:
    """The siblings of leaf ``position`` from the leaf up: ``(level, sibling position, side)``, where
    ``side`` is where the sibling sits (``"left"`` or ``"right"``). Levels where the node has no partner
    (it moves up unchanged) have no step."""
    steps = []
    for level, size in enumerate(level_sizes(leaf_count)[:-1]):
        if position % 2:
            steps.append((level, position - 1, "left"))
        elif position + 1 < size:
            steps.append((level, position + 1, "right"))
        position //= 2
    return steps


def format_units(units: int, decimals: int) -> str:
    """Smallest units as a plain amount with exactly ``decimals`` places (``format_units(5, 2) == "0.05"``)."""
    digits = str(units).rjust(decimals + 1, "0")
    return f"{digits[:-decimals]}.{digits[-decimals:]}" if decimals else digits
