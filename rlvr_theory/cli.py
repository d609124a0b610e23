"""Command line: ``rlvr-theory list | masses | table`` (also ``python -m rlvr_theory``).

Examples::

    rlvr-theory list
    rlvr-theory masses --advantage asym_grpo --param delta=0.5 --p 0.3 --G 8 --json
    rlvr-theory table --p 0.3 --p 0.5 --G 8 --format markdown
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Sequence

import numpy as np
import pandas as pd

from . import advantages, masses

__all__ = ["main", "parse_param", "format_frame", "json_safe"]


def parse_param(text: str) -> tuple[str, Any]:
    """``"delta=0.5"`` -> ``("delta", 0.5)``; values are int, float, true/false or none."""
    if "=" not in text:
        raise ValueError(f"--param must look like NAME=VALUE, got {text!r}")
    key, raw = (s.strip() for s in text.split("=", 1))
    low = raw.lower()
    if low in ("true", "false"):
        return key, low == "true"
    if low in ("none", "null"):
        return key, None
    try:
        return key, int(raw)
    except ValueError:
        pass
    try:
        return key, float(raw)
    except ValueError:
        raise ValueError(f"--param {key}: value must be a number, true/false or none, got {raw!r}") from None


def json_safe(value: Any) -> Any:
    """Floats as JSON numbers; inf/-inf/nan (not valid JSON) as the strings "inf", "-inf", "nan"."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (np.floating, float)):
        v = float(value)
        return v if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def _fmt(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.6g}"
    return str(v)


def format_frame(df: pd.DataFrame, fmt: str) -> str:
    """Render a DataFrame as ``markdown``, ``csv``, ``latex`` or ``json`` (records)."""
    if fmt == "csv":
        return df.to_csv(index=False, float_format="%.17g")
    if fmt == "json":
        return json.dumps(json_safe(df.to_dict(orient="records")), indent=1)
    cells = [[_fmt(v) for v in row] for row in df.itertuples(index=False)]
    cols = [str(c) for c in df.columns]
    if fmt == "markdown":
        lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
        return "\n".join(lines) + "\n"
    if fmt == "latex":
        def esc(s: str) -> str:
            return s.replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("&", "\\&").replace("%", "\\%")
        lines = ["\\begin{tabular}{" + "l" * len(cols) + "}", "\\hline",
                 " & ".join(esc(c) for c in cols) + " \\\\", "\\hline"]
        lines += [" & ".join(esc(c) for c in row) + " \\\\" for row in cells]
        lines += ["\\hline", "\\end{tabular}"]
        return "\n".join(lines) + "\n"
    raise ValueError(f"--format must be one of markdown, csv, latex, json; got {fmt!r}")


def _make_adv(name: str, params: Sequence[str], reward_values: Sequence[float] | None) -> advantages.Advantage:
    kw = dict(parse_param(s) for s in params)
    if reward_values is not None:
        kw["reward_values"] = tuple(reward_values)
    return advantages.get(name, **kw)


def _cmd_list(args: argparse.Namespace) -> str:
    rows = []
    for name, cls in advantages.registry().items():
        params = ", ".join(f"{k}={v}" for k, v in cls.defaults.items())
        rows.append({"name": name, "params": params, "kind": cls.kind,
                     "description": cls.description, "source": cls.source})
    df = pd.DataFrame(rows)
    if args.json:
        return json.dumps(json_safe(rows), indent=1)
    return format_frame(df, "markdown")


def _cmd_masses(args: argparse.Namespace) -> str:
    adv = _make_adv(args.advantage, args.param, args.reward_values)
    cf = masses.closed_form(adv, args.p, args.G)
    ex = masses.exact(adv, args.p, args.G)
    out = {
        "advantage": adv.name,
        "params": adv.params,
        "reward_values": list(adv.reward_values),
        "kind": adv.kind,
        "p": args.p,
        "G": args.G,
        "closed_form": {"m_S": float(cf.m_S), "m_F": float(cf.m_F)},
        "exact": {"m_S": float(ex.m_S), "m_F": float(ex.m_F)},
        "sign_ratio": float(masses.sign_ratio(adv, args.p, args.G)),
        "advantage_ratio": float(masses.advantage_ratio(adv, args.p, args.G)),
        "sign_ratio_exact": float(masses.sign_ratio(adv, args.p, args.G, exact=True)),
        "advantage_ratio_exact": float(masses.advantage_ratio(adv, args.p, args.G, exact=True)),
    }
    if args.json:
        return json.dumps(json_safe(out))
    ms, mf = adv.closed_form()
    lines = [f"{adv!r}  ({adv.source}; kind: {adv.kind})",
             f"closed form: m_S = {ms}    m_F = {mf}",
             f"p = {args.p:g}, G = {args.G}",
             f"  closed form (plug-in):  m_S = {out['closed_form']['m_S']:.10g}  m_F = {out['closed_form']['m_F']:.10g}",
             f"  exact, finite G:        m_S = {out['exact']['m_S']:.10g}  m_F = {out['exact']['m_F']:.10g}",
             f"  sign ratio m_S/m_F = {out['sign_ratio']:.10g}   rho = m_S p/(m_F q) = {out['advantage_ratio']:.10g}"]
    if adv.erratum:
        lines.append(f"  note: {adv.erratum}")
    return "\n".join(lines)


def _cmd_table(args: argparse.Namespace) -> str:
    ps = args.p if args.p else [0.3, 0.5]
    advs = [advantages.get(a) for a in args.advantage] if args.advantage else None
    df = masses.table(ps, args.G, advs)
    if args.format in ("markdown", "latex"):
        df = df.drop(columns=["G"])
    return format_frame(df, args.format)


def _cmd_tail_miss(args: argparse.Namespace) -> str:
    """Pr(A_N) and Pr(B_tau) (F-GRPO Eq. 9, Lemma 3.1) per N; JSON: one object with a "rows" list."""
    from . import tail_miss

    Ns = args.N if args.N else [2.0**k for k in range(1, 18)]
    N = np.asarray(Ns, dtype=float)
    act = np.atleast_1d(tail_miss.active(args.mu, N))
    miss = np.atleast_1d(tail_miss.probability(args.mu, args.tau, N))
    rows = [{"N": int(n), "active": float(a), "tail_miss": float(b)} for n, a, b in zip(N, act, miss)]
    out: dict[str, Any] = {"mu": args.mu, "tau": args.tau, "rows": rows}
    if args.peak:
        pk = tail_miss.peak(args.mu, args.tau)
        out.update(peak_N=int(pk.N), peak_value=float(pk.value))
    if args.json:
        return json.dumps(json_safe(out), indent=1)
    text = f"mu = {args.mu:g}, tau = {args.tau:g}  (F-GRPO Eq. 9 and Lemma 3.1)\n"
    text += format_frame(pd.DataFrame(rows, columns=["N", "active", "tail_miss"]), "markdown")
    if args.peak:
        text += f"peak: N = {out['peak_N']}, tail_miss = {out['peak_value']:.10g}\n"
    return text


def _add_tail_miss_parser(sub: Any) -> None:
    p = sub.add_parser("tail-miss", help="Pr(active) and tail-miss probability vs group size (F-GRPO Lemma 3.1)")
    p.add_argument("--mu", type=float, required=True, help="success probability in [0, 1]")
    p.add_argument("--tau", type=float, required=True, help="rare-correct mass in [0, mu]")
    p.add_argument("--N", type=float, nargs="+", action="extend", default=[],
                   help="group sizes, integers >= 1 (default 2 4 ... 131072)")
    p.add_argument("--peak", action="store_true", help="also print the maximising N and the maximum")
    p.add_argument("--json", action="store_true",
                   help='print one JSON object {"mu", "tau", "rows": [{"N", "active", "tail_miss"}], '
                        '["peak_N", "peak_value"]}')
    p.set_defaults(func=_cmd_tail_miss)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``rlvr-theory``."""
    ap = argparse.ArgumentParser(prog="rlvr-theory", description="Closed forms of RLVR advantage functions.")
    sub = ap.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="registered advantages with their parameters and sources")
    p_list.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    p_list.set_defaults(func=_cmd_list)

    p_m = sub.add_parser("masses", help="m_S, m_F of one advantage at one solve rate")
    p_m.add_argument("--advantage", required=True, help="registered name (see `rlvr-theory list`)")
    p_m.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                     help="advantage parameter, repeatable (e.g. --param delta=0.5)")
    p_m.add_argument("--reward-values", nargs=2, type=float, metavar=("R_W", "R_C"),
                     help="reward of a wrong and of a correct rollout (default 0 1)")
    p_m.add_argument("--p", type=float, required=True, help="solve rate in [0, 1]")
    p_m.add_argument("--G", type=int, default=8, help="group size for the exact column (default 8)")
    p_m.add_argument("--json", action="store_true", help="print one JSON object")
    p_m.set_defaults(func=_cmd_masses)

    p_t = sub.add_parser("table", help="FADE Table 1 / Table 7 with exact finite-G columns")
    p_t.add_argument("--p", type=float, action="extend", nargs="+", default=[],
                     help="solve rate(s), repeatable (default 0.3 0.5)")
    p_t.add_argument("--G", type=int, default=8, help="group size (default 8)")
    p_t.add_argument("--advantage", action="append", default=[], help="restrict to these names (repeatable)")
    p_t.add_argument("--format", choices=["markdown", "csv", "latex", "json"], default="markdown")
    p_t.set_defaults(func=_cmd_table)
    _add_tail_miss_parser(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``rlvr-theory``; returns the exit status (2 on bad input)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        text = args.func(args)
    except ValueError as err:
        print(f"rlvr-theory: error: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def main_exit() -> None:  # console-script entry point
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    main_exit()
