"""Ed25519 keys of the proofs: hex or PEM, key ids, signatures; the development key kept in the data folder."""

import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key

from apps.ledger.signing import (
    SigningKeyError,
    key_id_for,
    private_key_generate_hex,
    private_key_load,
    public_key_hex,
    sign,
    signature_valid,
)
from exchange.settings.environment import local_signing_key


def _pem(key) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def test_a_hex_seed_and_its_pem_are_the_same_key():
    seed = private_key_generate_hex()
    from_hex = private_key_load(seed)
    assert public_key_hex(private_key_load(_pem(from_hex))) == public_key_hex(from_hex)


@pytest.mark.parametrize("text", ["", "ab" * 31, "zz" * 32, "-----BEGIN GARBAGE-----\nnope\n-----END GARBAGE-----"])
def test_anything_else_is_refused(text):
    with pytest.raises(SigningKeyError):
        private_key_load(text)


def test_a_pem_key_of_another_kind_is_refused():
    with pytest.raises(SigningKeyError, match="not an Ed25519 key"):
        private_key_load(_pem(generate_private_key(public_exponent=65537, key_size=2048)))


def test_signatures_verify_only_for_their_hash_and_key():
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    digest = bytes(range(32))
    signature = sign(key, digest)

    assert len(signature) == 128 and signature_valid(public_key_hex(key), digest, signature)
    assert not signature_valid(public_key_hex(key), bytes(32), signature)
    assert not signature_valid(public_key_hex(other), digest, signature)
    assert not signature_valid(public_key_hex(key), digest, "00" * 64)
    assert len(key_id_for(public_key_hex(key))) == 16


def test_the_development_key_is_generated_once_readable_by_its_owner_only(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_DATA_DIR", str(tmp_path))

    first, second = local_signing_key(), local_signing_key()

    assert first == second and public_key_hex(private_key_load(first))
    assert stat.S_IMODE((tmp_path / "ledger-signing-key").stat().st_mode) == 0o600
