"""The q15 export's activation tables: their largest error over every int16 input, per activation and input format.

    python benchmarks/export_lut_error.py     # a second; writes benchmarks/results/export_lut_error/<UTC time>.json

For each input format Q``f`` (the range ±2^(15−f)) and each activation the q15 export tabulates (tanh, ELU, SiLU,
GELU), the 513-entry table is built as the export builds it, with the output in the format the activation's own
range over that input calls for, and ``fixed_formats.lut_error`` runs the C lookup (interpolation and roundings,
bit for bit) on all 65,536 inputs against the exact function. docs/export.md's table is built from the file
(``docs_table``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_file import add_out_argument, default_path, markdown_table, write_result

NAME = "export_lut_error"
ACTIVATIONS = ("tanh", "elu", "silu", "gelu")
SHOWN = {"tanh": "tanh", "elu": "ELU", "silu": "SiLU", "gelu": "GELU"}


def errors(f_in: int) -> dict[str, dict[str, Any]]:
    """Per activation: the output format chosen and the table's largest error, for inputs in Q``f_in``."""
    import numpy as np

    from robot_rl.export.fixed_formats import apply_activation, frac_bits, lut_error, lut_table

    x = np.arange(-32768, 32768) * 2.0**-f_in
    out = {}
    for act in ACTIVATIONS:
        f_out = frac_bits(float(np.abs(apply_activation(x, act)).max()))
        out[act] = {"f_out": f_out, "max_abs_err": lut_error(act, lut_table(act, f_in, f_out), f_in, f_out)}
    return out


def _e(x: float) -> str:
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def docs_table(records: list[dict[str, Any]]) -> str:
    """docs/export.md's table: the largest error per input format (rows) and activation (columns)."""
    rows = []
    for f_in, by_act in records[0]["results"]["formats"].items():
        rows.append([f"±{2 ** (15 - int(f_in)):g} (Q{f_in})", *(_e(by_act[a]["max_abs_err"]) for a in ACTIVATIONS)])
    return markdown_table(["input range (format)", *(SHOWN[a] for a in ACTIVATIONS)], rows, "-rrrr")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--formats", type=int, nargs="+", default=[14, 12, 10], help="input formats Q<f> (int16)")
    add_out_argument(p, NAME)
    args = p.parse_args()
    started = dt.datetime.now(dt.UTC)
    results = {"formats": {str(f): errors(f) for f in args.formats}}
    for f, by_act in results["formats"].items():
        print(f"Q{f}: " + ", ".join(f"{a} {r['max_abs_err']:.2g} (out Q{r['f_out']})" for a, r in by_act.items()))
    print(f"wrote {write_result(args.out or default_path(NAME, started), NAME, args, results, started)}")


if __name__ == "__main__":
    main()
