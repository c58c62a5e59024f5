# SPDX-License-Identifier: Apache-2.0
"""argparse types the benchmark scripts share (no dependencies beyond the standard library)."""
import argparse


def positive(kind=int):
    """An argparse type: a number of `kind` (int or float) above zero, or a one-line error."""
    def check(s):
        try:
            v = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r} is not {'an int' if kind is int else 'a number'}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {s}")
        return v
    return check
