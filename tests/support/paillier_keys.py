"""The two fixed primes of the tests' 1,024-bit Paillier key (accepted only with ``insecure_test_key=True``)."""
from __future__ import annotations

TEST_P = int("c1a7d0b46a5c831037a2263b5c887c8c88072622cd76d233c70d8cc6d1d1d60fc77015fcf9bc8ab2d5a6552858cad56d5ab45294"
             "ce5c1c010881098ce48a9b83", 16)
"""The key's first prime (512 bits)."""
TEST_Q = int("cfab0142fa039e728ea314829b4223c469aaf7f7aca685fd6bd438f8069f753dc94a020d43e0d9051d207238ffccc3e53135964a"
             "f2d42bf417b0ab7fb24db7fb", 16)
"""The key's second prime (512 bits)."""
