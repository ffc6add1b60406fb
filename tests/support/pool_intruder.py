"""Another local user against the local pool, for tests/system/test_local_pool.py. Started as root, it imports Ray (whose
files that user may not be able to read), becomes USER and prints one JSON line: what it got from each of the pool's
state files, and how its attempt to join the pool's Ray head at ADDRESS ended (with Ray's GCS client, the first
connection that ``ray.init(address=...)`` and ``ray start --address`` open; they themselves cannot run as that user
where the interpreter lives in root's home).

    python -m tests.support.pool_intruder USER STATE_DIR ADDRESS (--no-token | --token-guess | --token-from FILE)

``--token-from`` reads the token while still root: the control showing that the token, and nothing else, is what
the user lacks.
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
import tempfile
from pathlib import Path


def become(user: str) -> None:
    """Drop every privilege of root for those of ``user`` (its own groups only, its own temporary directory)."""
    entry = pwd.getpwnam(user)
    home = Path(tempfile.mkdtemp(prefix=f"{user}-"))
    os.chown(home, entry.pw_uid, entry.pw_gid)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    os.environ.update(HOME=str(home), RAY_TMPDIR=str(home), USER=user)


def read_each(directory: Path, names: list[str]) -> dict[str, str]:
    """``{name: "read N bytes" or the error}``: listing the state directory ("."), and reading each of its files."""
    outcome = {}
    for name in names:
        try:
            size = len(os.listdir(directory)) if name == "." else len((directory / name).read_bytes())
            outcome[name] = f"read {size} {'entries' if name == '.' else 'bytes'}"
        except OSError as exc:
            outcome[name] = type(exc).__name__
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("user")
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("address")
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--no-token", action="store_true")
    how.add_argument("--token-guess", action="store_true")
    how.add_argument("--token-from", type=Path)
    args = parser.parse_args()
    names = ["."] + sorted(os.listdir(args.state_dir))  # listed while still root
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    if args.no_token:
        os.environ["RAY_AUTH_MODE"] = "disabled"
    else:
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = args.token_from.read_text() if args.token_from else "0" * 64
    from ray._raylet import GcsClient  # the first connection `ray.init(address=...)` and `ray start --address` open

    become(args.user)
    files = read_each(args.state_dir, names)
    try:
        keys = GcsClient(address=args.address).internal_kv_keys(b"", None, timeout=10)
        joined = f"read {len(keys)} keys of the head's store"
    except Exception as exc:  # what Ray raised: the test checks which
        joined = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"uid": os.getuid(), "files": files, "joined": joined}), flush=True)


if __name__ == "__main__":
    main()
