"""``privsilo.protocols.kdf.hkdf_sha256`` is HKDF-SHA256 without salt: RFC 5869's test case 3 and ``cryptography``'s HKDF."""
import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from privsilo.protocols.kdf import hkdf_sha256


def test_rfc5869_test_case_3_without_salt_or_info() -> None:
    okm = bytes.fromhex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8")
    assert hkdf_sha256(bytes([0x0B] * 22), b"") == okm[:32]


def test_the_same_bytes_as_cryptographys_hkdf_for_any_secret_and_info() -> None:
    for length in (0, 1, 16, 31, 32, 33, 55, 56, 64, 65, 200):
        for _ in range(20):
            secret, info = os.urandom(length), os.urandom((7 * length) % 130)
            expected = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)
            assert hkdf_sha256(secret, info) == expected
