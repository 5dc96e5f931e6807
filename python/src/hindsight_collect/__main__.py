"""python -m hindsight_collect: status, validate and fingerprint from the shell."""

from __future__ import annotations

import argparse
import json
import sys

from .problem import RolloutFileError
from .reader import read_rollouts
from .rollout import fingerprint
from .status import DEFAULT_ADDR, StatusError, status


def main(argv: list[str] | None = None) -> int:
    """main runs the command line; it returns the exit status (0 ok, 1 failure,
    2 usage error)."""
    ap = argparse.ArgumentParser(prog="python -m hindsight_collect")
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("status", help="print the daemon's status as JSON")
    st.add_argument("--addr", default=DEFAULT_ADDR, help="status address HOST:PORT (default %(default)s)")
    st.add_argument("--timeout", type=float, default=5.0, help="seconds to wait (default %(default)s)")
    va = sub.add_parser("validate", help="check rollout files as the daemon would (one line per problem)")
    va.add_argument("--vocab", type=int, default=0, help="reject token ids >= N")
    va.add_argument("--tokenizer", default="", help="require this tokenizer fingerprint")
    va.add_argument("files", nargs="+")
    fp = sub.add_parser("fingerprint", help="print the tokenizer fingerprint of a tokenizer.json")
    fp.add_argument("file")
    args = ap.parse_args(argv)

    if args.cmd == "status":
        try:
            print(json.dumps(status(args.addr, timeout=args.timeout), indent=2, sort_keys=True))
        except StatusError as e:
            print(f"hindsight_collect status: {e}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "fingerprint":
        print(fingerprint(args.file))
        return 0
    bad = 0
    for path in args.files:
        n, problems = 0, 0
        try:
            for row in read_rollouts(path, vocab_size=args.vocab, tokenizer=args.tokenizer):
                n += 1
                for p in row.problems:
                    print(p)
                    problems += 1
        except RolloutFileError as e:
            print(e)
            problems += 1
        if problems:
            bad += 1
    if bad:
        print(f"hindsight_collect validate: {bad} of {len(args.files)} files invalid", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
