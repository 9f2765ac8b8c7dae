"""RFC 6962 tree hash and audit paths against the Certificate Transparency reference vectors."""

import pytest

from apps.ledger.merkle import EMPTY_ROOT, audit_path, leaf_hash, root_from_audit_path, tree_hash

# RFC 6962 reference leaves (raw leaf inputs) and the tree heads of sizes 0..8.
LEAVES = [bytes.fromhex(h) for h in ["", "00", "10", "2021", "3031", "40414243", "5051525354555657"]] + [
    bytes.fromhex("606162636465666768696a6b6c6d6e6f")
]
ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


@pytest.mark.parametrize("size", range(9))
def test_tree_hash_matches_the_reference_heads(size):
    assert tree_hash(LEAVES[:size]).hex() == ROOTS[size]


def test_the_empty_tree_is_the_hash_of_nothing():
    assert EMPTY_ROOT.hex() == ROOTS[0]


def test_audit_path_of_leaf_0_in_8_matches_the_reference():
    assert [h.hex() for h in audit_path(LEAVES, 0)] == [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ]


@pytest.mark.parametrize("size", range(1, 34))
def test_every_audit_path_folds_to_the_root_and_a_wrong_leaf_does_not(size):
    digests = [bytes([i, i * 7 % 256]) * 16 for i in range(size)]
    root = tree_hash(digests)
    for index in range(size):
        path = audit_path(digests, index)
        assert root_from_audit_path(digests[index], index, size, path) == root
        assert root_from_audit_path(b"\xff" * 32, index, size, path) != root
        if path:
            assert root_from_audit_path(digests[index], index, size, path[:-1]) is None


def test_leaf_hash_prefixes_a_zero_byte():
    assert leaf_hash(b"").hex() == ROOTS[1]
