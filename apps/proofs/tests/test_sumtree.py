"""The Merkle-sum tree's pure code: the level-by-level build is RFC 6962's split, and bad trees are refused."""

import hashlib

import pytest

from apps.proofs.sumtree import (
    Leaf,
    TreeError,
    encode_sums,
    format_units,
    leaf_level,
    leaves_ordered,
    levels,
    node_hash,
    path_steps,
    u128,
)


def _recursive_root(nodes: list[tuple[bytes, tuple[int, ...]]]) -> tuple[bytes, tuple[int, ...]]:
    """The sum tree split at the largest power of two smaller than n, as RFC 6962 section 2.1 says."""
    if len(nodes) == 1:
        return nodes[0]
    k = 1 << ((len(nodes) - 1).bit_length() - 1)
    (lh, ls), (rh, rs) = _recursive_root(nodes[:k]), _recursive_root(nodes[k:])
    return node_hash(lh, encode_sums(ls), rh, encode_sums(rs)), tuple(a + b for a, b in zip(ls, rs, strict=True))


def _leaves(count: int) -> list[Leaf]:
    return [
        Leaf(user_id, hashlib.sha256(b"n%d" % user_id).digest(), (user_id, 3 * user_id)) for user_id in range(count)
    ]


@pytest.mark.parametrize("count", range(1, 41))
def test_the_level_build_is_the_rfc_6962_split_and_every_path_folds_to_the_root(count):
    first = leaf_level(leaves_ordered(_leaves(count)))
    built = list(levels(first))
    root = built[-1]

    assert len(root) == 1
    assert (root.hashes[0], root.sums[0]) == _recursive_root(list(zip(first.hashes, first.sums, strict=True)))
    for position in range(count):
        current, sums = first.hashes[position], first.sums[position]
        for level, sibling, side in path_steps(position, count):
            other, other_sums = built[level].hashes[sibling], built[level].sums[sibling]
            if side == "left":
                current = node_hash(other, encode_sums(other_sums), current, encode_sums(sums))
            else:
                current = node_hash(current, encode_sums(sums), other, encode_sums(other_sums))
            sums = tuple(a + b for a, b in zip(sums, other_sums, strict=True))
        assert (current, sums) == (root.hashes[0], root.sums[0])


def test_two_leaves_for_one_user_are_refused():
    leaves = _leaves(3) + [Leaf(1, b"\x07" * 32, (5, 5))]
    with pytest.raises(TreeError, match="user 1 has two leaves"):
        leaves_ordered(leaves)


def test_a_negative_balance_cannot_be_encoded():
    with pytest.raises(TreeError, match="unsigned 128-bit amount"):
        leaf_level(leaves_ordered([Leaf(1, b"\x01" * 32, (-1, 0))]))


def test_a_sum_reaching_2_128_is_refused():
    leaves = [Leaf(1, b"\x01" * 32, (2**128 - 1,)), Leaf(2, b"\x02" * 32, (1,))]
    with pytest.raises(TreeError, match="reaches 2\\*\\*128"):
        list(levels(leaf_level(leaves_ordered(leaves))))


def test_u128_is_16_bytes_big_endian():
    assert u128(258) == b"\x00" * 14 + b"\x01\x02"


@pytest.mark.parametrize(
    "units, decimals, text", [(0, 8, "0.00000000"), (5, 2, "0.05"), (123456, 2, "1234.56"), (7, 0, "7")]
)
def test_units_format_with_exactly_the_asset_decimals(units, decimals, text):
    assert format_units(units, decimals) == text
