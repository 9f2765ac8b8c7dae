"""A dishonest prover for the attack tests: it holds the exchange's signing key and signs whatever root it
builds, so only the verifier's own checks stand between a forged proof and a customer."""

import copy
import hashlib

from apps.ledger.canonical import canon
from apps.ledger.seal.keys import signing_key_active
from apps.ledger.signing import sign
from apps.proofs.sumtree import format_units, leaf_id

MOD = 2**128


def u128_wrapping(units: list[int]) -> bytes:
    return b"".join((value % MOD).to_bytes(16, "big") for value in units)


def sound_node(left, left_sums, right, right_sums) -> bytes:
    return hashlib.sha256(b"\x01" + left + u128_wrapping(left_sums) + right + u128_wrapping(right_sums)).digest()


def maxwell_node(left, left_sums, right, right_sums) -> bytes:
    """The original Maxwell tree: a node hashes its children's hashes and only its own total."""
    total = [a + b for a, b in zip(left_sums, right_sums, strict=True)]
    return hashlib.sha256(left + right + u128_wrapping(total)).digest()


def amounts(units: list[int], assets: list[dict]) -> list[str]:
    return [
        format_units(value, a["decimals"]) if value >= 0 else "-" + format_units(-value, a["decimals"])
        for value, a in zip(units, assets, strict=True)
    ]


def forge(proof: dict, path: list[tuple[str, bytes, list[int]]], *, node=sound_node, wrap: bool = False) -> dict:
    """``proof`` (a real one) with ``path`` as its path, and a snapshot the prover signs over the root that this
    path gives with ``node``; sums wrap modulo 2**128 when ``wrap`` (an overflowing prover)."""
    assets = proof["snapshot"]["assets"]
    balances = [int(b.replace(".", "")) for b in proof["balances"]]
    current = hashlib.sha256(
        b"\x00" + leaf_id(bytes.fromhex(proof["nonce"]), proof["user_id"]) + u128_wrapping(balances)
    ).digest()
    sums = balances
    for side, sibling, sibling_sums in path:
        if side == "left":
            current = node(sibling, sibling_sums, current, sums)
        else:
            current = node(current, sums, sibling, sibling_sums)
        sums = [(a + b) % MOD if wrap else a + b for a, b in zip(sums, sibling_sums, strict=True)]
    forged = copy.deepcopy(proof)
    forged["path"] = [
        {"side": side, "hash": sibling.hex(), "sums": amounts(sibling_sums, assets)}
        for side, sibling, sibling_sums in path
    ]
    forged["snapshot"]["root_hash"] = current.hex()
    forged["snapshot"]["root_sums"] = amounts(sums, assets)
    return resign(forged)


def resign(proof: dict, document: str = "snapshot") -> dict:
    """Hash and sign the proof's ``document`` (a liabilities snapshot, or an entry proof's ``block``) with the
    exchange's own key."""
    digest = hashlib.sha256(canon(proof[document])).digest()
    key = signing_key_active()
    proof[f"{document}_hash"] = digest.hex()
    proof["signature"] = sign(key.private_key, digest)
    proof["key_id"] = key.row.key_id
    return proof


def path_units(proof: dict) -> list[tuple[str, bytes, list[int]]]:
    """A proof's path as ``(side, hash, sums in units)``."""
    return [
        (step["side"], bytes.fromhex(step["hash"]), [int(s.replace(".", "")) for s in step["sums"]])
        for step in proof["path"]
    ]
