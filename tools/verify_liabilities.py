#!/usr/bin/env python3
"""Check a proof downloaded from the exchange, without trusting the exchange's code: a proof of liabilities
(PROOFS.md section 2) or a journal entry's proof (section 1).

Usage::

    python verify_liabilities.py my-proof.json --keys https://exchange.example/api/v1/proofs/keys/
    python verify_liabilities.py my-proof.json --keys keys.json --expect BTC=0.50000000 --expect USDT=12.000000
    python verify_liabilities.py entry-42-proof.json --keys keys.json

Needs Python 3.10+ and the ``cryptography`` package (Ed25519), nothing else; it imports no
code of the exchange. It does what PROOFS.md section 2 says a verifier must do, and refuses
otherwise:

0. read the proof strictly: no key twice in an object, exactly the fields PROOFS.md lists, integers as JSON
   integers, hashes as 64 lower-case hex characters, ``taken_at`` as ISO 8601 UTC with microseconds and ``Z``;
1. recompute your leaf from ``nonce``, ``user_id`` and ``balances``
   (``SHA256(0x00 || SHA256(nonce || user_id as 8 bytes) || u128(balance)...)``); a leaf of nothing but zeros
   is refused (users with nothing are left out of the tree);
2. fold the path up to the root, hashing both children's hashes and sums at every node;
   every amount must be non-negative with exactly its asset's decimals, every sum below 2**128; the path must
   have the shape of a leaf's path in a tree of ``leaf_count`` leaves split as RFC 6962 splits it (so the
   snapshot cannot claim more or fewer customers than its tree has on your path's side);
3. compare the result with the snapshot's ``root_hash`` and ``root_sums``;
4. check ``snapshot_hash = SHA256(canon(snapshot))`` and its Ed25519 signature with the key
   ``key_id`` from the keys endpoint (a URL, or a saved copy of its JSON);
5. show the balances so you can check they are yours at the snapshot's time (``--expect``
   checks them for you).

A journal entry's proof (``GET /api/v1/ledger/entries/<id>/proof/``, or the activity page's download) is read as
strictly; the entry must have two or more postings in id order, none zero, each amount and balance in plain
notation with its asset's decimals the same throughout the entry (the entry does not say how many an asset has),
and its amounts must sum to zero per asset. Then ``SHA256(canon(entry))`` must lead through the RFC 6962 audit
path (RFC 9162 section 2.1.3.2) from ``leaf_index`` in a tree of ``tree_size`` (the block's ``entry_count``) to the
block's ``entries_root``, and ``block_hash`` must be ``SHA256(canon(block))``, signed with a published key. Keep
the block's hash: a later ``GET /api/v1/proofs/journal/blocks/<height>/`` must show the same (blocks are chained).

Exit status 0 when the proof holds, 1 with the reason when it does not, 2 for a usage error (a bad argument).
"""

import argparse
import datetime
import decimal
import hashlib
import http.client
import json
import os
import re
import sys
import urllib.request

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

U128_LIMIT = 2**128
MAX_PATH = 64
_HASH = re.compile(r"[0-9a-f]{64}")
_SIGNATURE = re.compile(r"[0-9a-f]{128}")
_CODE = re.compile(r"[A-Z0-9]{2,10}")
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
_SIGNED_AMOUNT = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")
ENTRY_PROOF_FIELDS = {"entry", "block", "block_hash", "signature", "key_id", "leaf_index", "tree_size", "audit_path"}
ENTRY_FIELDS = {
    "version",
    "id",
    "idempotency_key",
    "reason",
    "reference_type",
    "reference_id",
    "created_at",
    "postings",
}
POSTING_FIELDS = {"id", "account_id", "asset", "amount", "balance_after"}
BLOCK_FIELDS = {"version", "height", "previous_hash", "entries_root", "entry_count", "sealed_at"}
PROOF_FIELDS = {"snapshot", "snapshot_hash", "signature", "key_id", "user_id", "nonce", "balances", "path"}
SNAPSHOT_FIELDS = {
    "version",
    "snapshot_id",
    "block_height",
    "block_hash",
    "taken_at",
    "assets",
    "leaf_count",
    "root_hash",
    "root_sums",
}


class Refused(Exception):
    """The proof does not hold; the message says why."""


def canon(value) -> bytes:
    """Canonical JSON: keys sorted, no insignificant whitespace, UTF-8. Raises :class:`Refused` for a string that
    UTF-8 cannot hold (a lone surrogate such as ``"\\ud800"``, which JSON can carry)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise Refused("a text of the proof is not valid Unicode (a lone surrogate)") from None


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def loads(text: str):
    """JSON as PROOFS.md's ``canon`` writes it, read strictly: an object naming a key twice is refused (parsers
    disagree on which value wins, so a proof could show one balance and prove another)."""

    def unique(pairs: list[tuple[str, object]]) -> dict:
        names = [name for name, _ in pairs]
        if len(names) != len(set(names)):
            raise Refused(f"an object names a key twice: {sorted({n for n in names if names.count(n) > 1})}")
        return dict(pairs)

    return json.loads(text, object_pairs_hook=unique)


def parse_count(value, what: str, *, least: int = 0) -> int:
    """A JSON integer (not a boolean, a string or a float) of at least ``least``."""
    if type(value) is not int or value < least:
        raise Refused(f"{what} {value!r} is not an integer of at least {least}")
    return value


def parse_time(value, what: str) -> str:
    """An ISO 8601 UTC time with microseconds and a ``Z`` (``2026-12-01T07:01:56.123456Z``) that is a real moment."""
    if not isinstance(value, str) or not _TIME.fullmatch(value):
        raise Refused(f"{what} {value!r} is not an ISO 8601 UTC time with microseconds and a Z")
    try:
        datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        raise Refused(f"{what} {value!r} is not a real time") from None
    return value


def check_fields(value: dict, fields: set[str], what: str) -> None:
    if set(value) != fields:
        missing, extra = sorted(fields - set(value)), sorted(set(value) - fields)
        raise Refused(f"{what} does not have exactly PROOFS.md's fields (missing {missing}, unknown {extra})")


def check_document(value, fields: set[str], what: str) -> None:
    """``value`` is an object of ``version`` 1 (a JSON integer) with exactly PROOFS.md's ``fields``."""
    if not isinstance(value, dict):
        raise Refused(f"{what} is not an object")
    if type(value.get("version")) is not int or value["version"] != 1:
        raise Refused(f"{what}'s version {value.get('version')!r} is not one this verifier knows (1)")
    check_fields(value, fields, what)


def check_snapshot(snapshot: dict) -> int:
    """The snapshot header's fields and their types; return its ``leaf_count``."""
    check_document(snapshot, SNAPSHOT_FIELDS, "the snapshot")
    parse_count(snapshot["snapshot_id"], "snapshot_id", least=1)
    parse_count(snapshot["block_height"], "block_height")
    parse_hash(snapshot["block_hash"], "block_hash")
    parse_time(snapshot["taken_at"], "taken_at")
    return parse_count(snapshot["leaf_count"], "leaf_count", least=1)


def check_path_shape(sides: list[str], leaf_count: int) -> None:
    """``sides`` (the path's, leaf to root) are those of a leaf's path in a tree of ``leaf_count`` leaves split at
    the largest power of two below each subtree's size (RFC 6962 section 2.1): from the root down, a sibling on the
    right means the leaf is in the left part, and the walk must reach a single leaf exactly at the path's end."""
    size = leaf_count
    for depth, side in enumerate(reversed(sides)):
        if size < 2:
            raise Refused(f"the path is longer than a leaf's path in a tree of {leaf_count} leaves (step {depth})")
        left = 1 << ((size - 1).bit_length() - 1)
        size = left if side == "right" else size - left
    if size != 1:
        raise Refused(f"the path is shorter than a leaf's path at that place in a tree of {leaf_count} leaves")


def parse_hash(value, what: str) -> bytes:
    if not isinstance(value, str) or not _HASH.fullmatch(value):
        raise Refused(f"{what} is not a SHA-256 hash of 64 lower-case hex characters: {value!r}")
    return bytes.fromhex(value)


def parse_units(value, decimals: int, what: str) -> int:
    """An amount string with exactly ``decimals`` places, as smallest units below 2**128."""
    pattern = r"(0|[1-9][0-9]*)" + (rf"\.[0-9]{{{decimals}}}" if decimals else "")
    if not isinstance(value, str) or len(value) > 60 or not re.fullmatch(pattern, value):  # 2**128 has 39 digits
        raise Refused(
            f"{what} {value[:60] if isinstance(value, str) else value!r} is not a non-negative amount "
            f"with exactly {decimals} decimals below 2**128"
        )
    units = int(value.replace(".", ""))
    if units >= U128_LIMIT:
        raise Refused(f"{what} {value!r} does not fit in 128 bits")
    return units


def parse_vector(values, assets: list[dict], what: str) -> list[int]:
    if not isinstance(values, list) or len(values) != len(assets):
        raise Refused(f"{what} must list one amount per asset ({len(assets)})")
    return [parse_units(v, a["decimals"], f"{what} ({a['code']})") for v, a in zip(values, assets, strict=True)]


def u128s(units: list[int]) -> bytes:
    return b"".join(value.to_bytes(16, "big") for value in units)


def parse_assets(snapshot: dict) -> list[dict]:
    assets = snapshot.get("assets")
    if not isinstance(assets, list) or not assets:
        raise Refused("the snapshot lists no assets")
    for asset in assets:
        if not (
            isinstance(asset, dict)
            and set(asset) == {"code", "decimals"}
            and isinstance(asset["code"], str)
            and _CODE.fullmatch(asset["code"])
            and type(asset["decimals"]) is int
            and 0 <= asset["decimals"] <= 18
        ):
            raise Refused(f"the snapshot's asset {asset!r} is not a code with its decimals (0 to 18)")
    codes = [asset["code"] for asset in assets]
    if codes != sorted(set(codes)):
        raise Refused("the snapshot's assets are not in alphabetical order without repeats")
    return assets


_P = 2**255 - 19
_D = -121665 * pow(121666, -1, _P) % _P


def _point(encoded: bytes) -> tuple[int, int, int, int] | None:
    """The Ed25519 point an encoded public key names, in extended coordinates ``(X, Y, Z, T)``; ``None`` for an
    encoding that names none or is not canonical (RFC 8032 section 5.1.3, decoding)."""
    y = int.from_bytes(encoded, "little") & (2**255 - 1)
    sign = encoded[31] >> 7
    if y >= _P:
        return None
    u, v = (y * y - 1) % _P, (_D * y * y + 1) % _P
    x = u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P) % _P
    if v * x * x % _P == (-u) % _P:
        x = x * pow(2, (_P - 1) // 4, _P) % _P
    elif v * x * x % _P != u:
        return None
    if x == 0 and sign == 1:
        return None
    if x % 2 != sign:
        x = _P - x
    return x, y, 1, x * y % _P


def _doubled(point: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """``point + point`` (RFC 8032 section 5.1.4's addition, complete on this curve)."""
    x, y, z, t = point
    a, b = (y - x) * (y - x) % _P, (y + x) * (y + x) % _P
    c, d = t * 2 * _D * t % _P, z * 2 * z % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % _P, g * h % _P, f * g % _P, e * h % _P


def _usable_public_key(public_key: str) -> bool:
    """Whether ``public_key`` (64 hex characters) names a point of the curve, canonically encoded, of large order:
    with a point of small order (the identity, or one of order 2, 4 or 8) a signature of all zeros but its first
    byte verifies for ANY message, so a keys document listing one lets anyone forge a proof (break-it review)."""
    point = _point(bytes.fromhex(public_key))
    if point is None:
        return False
    for _ in range(3):  # [8]P: the identity exactly when P's order divides the cofactor 8
        point = _doubled(point)
    x, y, z, _ = point
    return not (x == 0 and y == z)


def key_id_of(public_key: str) -> str:
    """PROOFS.md's ``key_id`` of a public key (64 hex characters): the first 16 hex characters of the SHA-256 of
    its 32 raw bytes."""
    return sha256(bytes.fromhex(public_key)).hex()[:16]


def published_keys(keys) -> dict:
    """The keys endpoint's ``{"keys": [{"key_id", "public_key", ...}, ...]}`` as ``{key_id: public key hex}``.
    Raises :class:`Refused` for a document of another shape, a ``key_id`` that is not the one its public key
    gives (PROOFS.md: a verifier recomputes it and refuses a mismatch), or one named twice (which one would count
    is the reader's choice)."""
    entries = keys.get("keys") if isinstance(keys, dict) else None
    if not isinstance(entries, list):
        raise Refused('the keys are not {"keys": [...]} as GET /api/v1/proofs/keys/ serves them')
    published = {}
    for key in entries:
        key_id = key.get("key_id") if isinstance(key, dict) else None
        public_key = key.get("public_key") if isinstance(key, dict) else None
        if not isinstance(key_id, str) or not isinstance(public_key, str) or not _HASH.fullmatch(public_key):
            raise Refused("a published key is not {key_id, public_key (64 lower-case hex characters)}")
        if not _usable_public_key(public_key):
            raise Refused(f"the published key {key_id!r} is not a usable Ed25519 public key (small order or invalid)")
        if key_id != key_id_of(public_key):
            raise Refused(f"the published key {key_id!r} is not the key_id of its public key ({key_id_of(public_key)})")
        if key_id in published:
            raise Refused(f"the key {key_id!r} is published twice")
        published[key_id] = public_key
    return published


def check_signature(proof: dict, keys: dict, document: str = "snapshot") -> None:
    """``proof[document + "_hash"]`` is ``SHA256(canon(proof[document]))`` and ``proof["signature"]`` its Ed25519
    signature by the published key ``proof["key_id"]``."""
    stated = parse_hash(proof.get(f"{document}_hash"), f"{document}_hash")
    if sha256(canon(proof[document])) != stated:
        raise Refused(f"{document}_hash is not the SHA-256 of the {document}: the {document} was altered")
    key_id = proof.get("key_id")
    public_key = published_keys(keys).get(key_id) if isinstance(key_id, str) else None
    if public_key is None:
        raise Refused(f"key {key_id!r} is not among the exchange's published keys")
    signature = proof.get("signature")
    if not isinstance(signature, str) or not _SIGNATURE.fullmatch(signature):
        raise Refused("the signature is not 128 lower-case hex characters")
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key)).verify(bytes.fromhex(signature), stated)
    except InvalidSignature:
        raise Refused(f"the signature does not verify with key {proof['key_id']}") from None


def fold(proof: dict, assets: list[dict]) -> tuple[bytes, list[int]]:
    """The root hash and sums that the leaf and path prove."""
    user_id = proof.get("user_id")
    if type(user_id) is not int or not 0 <= user_id < 2**64:
        raise Refused(f"user_id {user_id!r} is not an unsigned 64-bit integer")
    nonce = proof.get("nonce")
    if not isinstance(nonce, str) or not _HASH.fullmatch(nonce):
        raise Refused("the nonce is not 32 bytes of lower-case hex")
    sums = parse_vector(proof.get("balances"), assets, "balance")
    if not any(sums):
        raise Refused("every balance of the leaf is zero: users with nothing are left out of the tree")
    leaf_id = sha256(bytes.fromhex(nonce) + user_id.to_bytes(8, "big"))
    current = sha256(b"\x00" + leaf_id + u128s(sums))
    path = proof.get("path")
    if not isinstance(path, list) or len(path) > MAX_PATH:
        raise Refused("the path is not a list of at most 64 steps")
    for depth, step in enumerate(path):
        if not isinstance(step, dict) or set(step) != {"side", "hash", "sums"} or step["side"] not in ("left", "right"):
            raise Refused(f"path step {depth} is not {{side: left|right, hash, sums}}")
        sibling = parse_hash(step["hash"], f"path step {depth} hash")
        sibling_sums = parse_vector(step["sums"], assets, f"path step {depth} sum")
        if step["side"] == "left":
            current = sha256(b"\x01" + sibling + u128s(sibling_sums) + current + u128s(sums))
        else:
            current = sha256(b"\x01" + current + u128s(sums) + sibling + u128s(sibling_sums))
        sums = [a + b for a, b in zip(sums, sibling_sums, strict=True)]
        if any(value >= U128_LIMIT for value in sums):
            raise Refused(f"the sum at path step {depth} reaches 2**128")
    return current, sums


def verify(proof: dict, keys: dict) -> list[str]:
    """Check ``proof`` against the exchange's published ``keys``; return the balances (amount strings).

    Raises :class:`Refused` saying why the proof does not hold.
    """
    if not isinstance(proof, dict) or not isinstance(proof.get("snapshot"), dict):
        raise Refused("this is not a proof of liabilities (no snapshot)")
    snapshot = proof["snapshot"]
    leaf_count = check_snapshot(snapshot)
    check_fields(proof, PROOF_FIELDS, "the proof")
    assets = parse_assets(snapshot)
    root_hash = parse_hash(snapshot.get("root_hash"), "root_hash")
    root_sums = parse_vector(snapshot.get("root_sums"), assets, "root sum")
    check_signature(proof, keys)
    computed_hash, computed_sums = fold(proof, assets)
    check_path_shape([step["side"] for step in proof["path"]], leaf_count)
    if computed_hash != root_hash:
        raise Refused("the path does not lead to the snapshot's root_hash: this leaf is not in the tree")
    if computed_sums != root_sums:
        raise Refused("the path's sums do not add up to the snapshot's root_sums")
    return list(proof["balances"])


def parse_signed_units(value, what: str) -> tuple[int, int]:
    """A signed amount in plain notation (``"-100.000000"``) as exact ``(units, decimals)`` (``(-100000000, 6)``):
    sums of them are exact however many digits they have. ``-0`` is refused, and so is text over 60 characters
    (the ledger's amounts have at most 38 digits)."""
    if (
        not isinstance(value, str)
        or len(value) > 60
        or not _SIGNED_AMOUNT.fullmatch(value)
        or value.startswith("-")
        and not value.strip("-0.")
    ):
        raise Refused(f"{what} {value[:60] if isinstance(value, str) else value!r} is not an amount in plain notation")
    whole, _, fraction = value.lstrip("-").partition(".")
    units = int(whole + fraction)
    return (-units if value.startswith("-") else units), len(fraction)


def check_entry(entry) -> None:
    """The entry document: PROOFS.md's fields, postings in id order, none zero, balanced per asset."""
    check_document(entry, ENTRY_FIELDS, "the entry")
    parse_count(entry["id"], "the entry's id", least=1)
    for name in ("idempotency_key", "reason", "reference_type", "reference_id"):
        if not isinstance(entry[name], str):
            raise Refused(f"the entry's {name} is not a string")
    parse_time(entry["created_at"], "the entry's created_at")
    postings = entry["postings"]
    if not isinstance(postings, list) or len(postings) < 2:
        raise Refused("an entry has two or more postings")
    previous_id = 0
    totals: dict[str, int] = {}
    places: dict[str, int] = {}
    for index, posting in enumerate(postings):
        what = f"posting {index}"
        if not isinstance(posting, dict):
            raise Refused(f"{what} is not an object")
        check_fields(posting, POSTING_FIELDS, what)
        if parse_count(posting["id"], f"{what}'s id", least=1) <= previous_id:
            raise Refused(f"{what} is not in posting id order")
        previous_id = posting["id"]
        parse_count(posting["account_id"], f"{what}'s account_id", least=1)
        asset = posting["asset"]
        if not isinstance(asset, str) or not _CODE.fullmatch(asset):
            raise Refused(f"{what}'s asset {asset!r} is not an asset code")
        amount, decimals = parse_signed_units(posting["amount"], f"{what}'s amount")
        _, after_decimals = parse_signed_units(posting["balance_after"], f"{what}'s balance_after")
        if amount == 0:
            raise Refused(f"{what} moves nothing")
        if places.setdefault(asset, decimals) != decimals or after_decimals != decimals:
            raise Refused(f"{what}'s {asset} amounts do not all have the same number of decimals")
        totals[asset] = totals.get(asset, 0) + amount  # units of the same decimals: exact
    unbalanced = sorted(code for code, total in totals.items() if total != 0)
    if unbalanced:
        raise Refused(
            f"the entry's postings do not sum to zero in {', '.join(unbalanced)}: it creates or destroys money"
        )


def check_block(block) -> None:
    """The block header: PROOFS.md's fields and their types."""
    check_document(block, BLOCK_FIELDS, "the block")
    height = parse_count(block["height"], "the block's height")
    parse_hash(block["previous_hash"], "previous_hash")
    if height == 0 and block["previous_hash"] != "0" * 64:
        raise Refused("the first block (height 0) names a previous block: its previous_hash must be 64 zeros")
    parse_hash(block["entries_root"], "entries_root")
    parse_count(block["entry_count"], "entry_count", least=1)
    parse_time(block["sealed_at"], "sealed_at")


def root_from_audit_path(leaf: bytes, index: int, size: int, path: list[bytes]) -> bytes:
    """The Merkle tree hash that ``leaf`` (an entry digest) at ``index`` of ``size`` leaves and its audit ``path``
    lead to (RFC 9162 section 2.1.3.2, the verification of RFC 6962's audit paths). Raises :class:`Refused` when
    the path's length does not fit the tree."""
    node, last = index, size - 1
    current = sha256(b"\x00" + leaf)
    for sibling in path:
        if last == 0:
            raise Refused("the audit path is longer than a leaf's path in a tree of that size")
        if node % 2 == 1 or node == last:
            current = sha256(b"\x01" + sibling + current)
            while node % 2 == 0 and node != 0:
                node, last = node >> 1, last >> 1
        else:
            current = sha256(b"\x01" + current + sibling)
        node, last = node >> 1, last >> 1
    if last != 0:
        raise Refused("the audit path is shorter than a leaf's path in a tree of that size")
    return current


def verify_entry(proof: dict, keys: dict) -> dict:
    """Check a journal entry's ``proof`` against the exchange's published ``keys``; return the entry.

    Raises :class:`Refused` saying why the proof does not hold.
    """
    check_fields(proof, ENTRY_PROOF_FIELDS, "the entry's proof")
    check_entry(proof["entry"])
    block = proof["block"]
    check_block(block)
    size = parse_count(proof["tree_size"], "tree_size", least=1)
    if size != block["entry_count"]:
        raise Refused(f"tree_size {size} is not the block's entry_count {block['entry_count']}")
    index = parse_count(proof["leaf_index"], "leaf_index")
    if index >= size:
        raise Refused(f"leaf_index {index} is outside a tree of {size} entries")
    path = proof["audit_path"]
    if not isinstance(path, list) or len(path) > MAX_PATH:
        raise Refused("the audit path is not a list of at most 64 hashes")
    siblings = [parse_hash(value, f"audit path step {depth}") for depth, value in enumerate(path)]
    check_signature(proof, keys, document="block")
    root = root_from_audit_path(sha256(canon(proof["entry"])), index, size, siblings)
    if root.hex() != block["entries_root"]:
        raise Refused("the audit path does not lead to the block's entries_root: this entry is not in the block")
    return proof["entry"]


def load_keys(source: str) -> dict:
    """The keys endpoint's JSON from a URL (``http(s)://``) or a saved file, read as strictly as a proof
    (:func:`loads`)."""
    if source.startswith(("https://", "http://")):
        with urllib.request.urlopen(source, timeout=30) as response:  # noqa: S310 (the user's own choice)
            return loads(response.read().decode("utf-8"))
    with open(source, encoding="utf-8") as file:
        return loads(file.read())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Verify a proof of liabilities or a journal entry's proof (PROOFS.md sections 2 and 1)."
    )
    parser.add_argument("proof", help="the proof JSON file downloaded from the exchange")
    parser.add_argument("--keys", required=True, help="the keys endpoint URL, or a saved copy of its JSON")
    parser.add_argument(
        "--expect",
        action="append",
        default=[],
        type=_expectation,
        metavar="CODE=AMOUNT",
        help="your balance of an asset (liabilities)",
    )
    parser.add_argument(
        "--user-id",
        type=int,
        metavar="N",
        help="your user id (liabilities): a proof of another customer's leaf is refused",
    )
    args = parser.parse_args(argv)
    try:
        with open(args.proof, encoding="utf-8") as file:
            proof = loads(file.read())
        keys = load_keys(args.keys)
    except (OSError, ValueError, RecursionError, http.client.HTTPException, Refused) as exc:  # RecursionError: JSON
        # nested too deep; HTTPException: a keys URL answering a broken response (a short body, a bad status line)
        print(f"REFUSED: cannot read the proof or the keys: {exc}")
        return 1
    try:
        if isinstance(proof, dict) and "entry" in proof:
            if args.expect or args.user_id is not None:
                raise Refused("--expect and --user-id check a proof of liabilities; this is a journal entry's proof")
            lines = _entry_report(proof, verify_entry(proof, keys))
        else:
            lines = _liabilities_report(proof, verify(proof, keys), args.expect, args.user_id)
    except Refused as exc:
        print(f"REFUSED: {exc}")
        return 1
    print("\n".join(lines))
    return 0


def _liabilities_report(
    proof: dict, balances: list[str], expected: list[tuple[str, str, decimal.Decimal]], user_id: int | None
) -> list[str]:
    """What a verified proof of liabilities shows; raises :class:`Refused` for a balance not as ``expected`` or a
    leaf of another user than ``user_id``. The leaf's user id is the customer's anchor: without it, an exchange
    could hand two customers with the same balances one leaf, and leave the other's liability out of the tree."""
    if user_id is not None and proof["user_id"] != user_id:
        raise Refused(f"this proof is of user {proof['user_id']}, not of user {user_id}: it is not your leaf")
    mine = {a["code"]: b for a, b in zip(proof["snapshot"]["assets"], balances, strict=True)}
    for code, amount, value in expected:
        if code not in mine:
            raise Refused(f"the snapshot has no asset {code!r} (its assets: {', '.join(mine)})")
        if decimal.Decimal(mine[code]) != value:
            raise Refused(f"your {code} balance in the snapshot is {mine.get(code)}, not {amount}")
    snapshot = proof["snapshot"]
    return [
        f"OK: user {proof['user_id']} is in snapshot {snapshot['snapshot_id']} "
        f"(block {snapshot['block_height']}, {snapshot['taken_at']}) of {snapshot['leaf_count']} users.",
        *(
            f"  {code}: {amount}  (total of all customers: {snapshot['root_sums'][position]})"
            for position, (code, amount) in enumerate(mine.items())
        ),
        "Check that these balances are yours at that time (your statement shows each balance after).",
        *([] if user_id is not None else [f"Check that {proof['user_id']} is your user id (or pass --user-id)."]),
    ]


def _entry_report(proof: dict, entry: dict) -> list[str]:
    """What a verified journal entry's proof shows."""
    block = proof["block"]
    return [
        f"OK: entry {entry['id']} ({entry['idempotency_key']}) is entry {proof['leaf_index'] + 1} of "
        f"{proof['tree_size']} in block {block['height']}, sealed {block['sealed_at']} and signed with key "
        f"{proof['key_id']}.",
        *(
            f"  posting {p['id']}: account {p['account_id']} {p['asset']} {p['amount']} (balance after "
            f"{p['balance_after']})"
            for p in entry["postings"]
        ),
        f"Keep the block hash {proof['block_hash']}: GET /api/v1/proofs/journal/blocks/{block['height']}/ must "
        "show the same one now and later (every later block is chained to it).",
    ]


def _expectation(text: str) -> tuple[str, str, decimal.Decimal]:
    """``--expect CODE=AMOUNT`` as ``(code, amount as typed, amount as a number)``: ``12``, ``12.000000`` and
    ``1,012.5`` (as the wallet page shows it) are compared by value, not as text. Anything else is a usage error
    (exit 2, as argparse's own: a typo, not a verdict on the proof)."""
    code, equals, amount = text.partition("=")
    try:
        value = decimal.Decimal(amount.replace(",", ""))
    except decimal.InvalidOperation:
        value = None
    if not code or not equals or value is None or not value.is_finite():
        raise argparse.ArgumentTypeError(f"{text!r} is not CODE=AMOUNT, such as BTC=0.5")
    return code, amount, value


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the output piped to a reader that stopped (``| head``): no traceback
        # Python's documented remedy (the signal module's "Note on SIGPIPE"): point stdout at devnull so that
        # the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
