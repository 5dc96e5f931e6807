"""Go's formatting of the values that appear in problem reasons (%v of a float32, %q).

The Go reader and this package share the reason wording of every problem, so the values
inside a reason are printed the way Go's fmt prints them.
"""

from __future__ import annotations

import math
from array import array


def f32(x: float) -> float:
    """f32 rounds x to the nearest float32, as writing it into a float32 column does
    (values beyond the float32 range become ±inf)."""
    return array("f", [x])[0]


def go_float32(x: float) -> str:
    """go_float32 formats x (a float32 value) like Go's fmt %v of a float32:
    strconv.FormatFloat(x, 'g', -1, 32)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    s = ""
    for prec in range(9):  # the shortest decimal that reads back as the same float32
        s = f"{abs(x):.{prec}e}"
        if f32(float(s)) == abs(x):
            break
    mant, exp_s = s.split("e")
    exp = int(exp_s)
    digits = mant.replace(".", "").rstrip("0") or "0"
    sign = "-" if x < 0 else ""
    if exp < -4 or exp >= 6:  # Go's %v uses %e outside this range when the precision is shortest
        frac = "." + digits[1:] if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{frac}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    point = exp + 1  # digits before the decimal point
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


_ESCAPES = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t", "\v": r"\v",
            "\\": r"\\", '"': r"\""}


def go_quote(s: str) -> str:
    """go_quote quotes s like Go's %q (strconv.Quote)."""
    out = ['"']
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)
