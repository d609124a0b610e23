"""Command line: ``rlvr-theory list | masses | table | tail-miss`` (also ``python -m rlvr_theory``).

Built on :mod:`rlvr_plumbing.runner` (errors exit 2 naming the flag, Ctrl-C exits 130, a
closed pipe ends quietly) and :mod:`rlvr_plumbing.serialize` (strict JSON: NaN is ``null``,
``±inf`` the strings ``"inf"``/``"-inf"``; table cells through ``fmt_number``).

Examples::

    rlvr-theory list
    rlvr-theory masses --advantage asym_grpo --param delta=0.5 --p 0.3 --G 8 --json
    rlvr-theory table --p 0.3 --p 0.5 --G 8 --format markdown
    rlvr-theory table --advantage grpo --advantage asym_grpo --param delta=0.5 --p 0.3
    rlvr-theory tail-miss --mu 0.64 --tau 6.3e-5 --N 1024 131072 --peak --json
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rlvr_plumbing import runner
from rlvr_plumbing.serialize import dumps, fmt_number

if TYPE_CHECKING:
    import pandas as pd

    from . import advantages

# numpy, pandas and the modules of rlvr_theory (sympy, scipy) are imported inside the commands
# that use them: `rlvr-theory --help` loads none of them (tests/test_cli_import_time.py)

__all__ = ["main", "main_exit", "build_parser", "format_frame"]

PROG = "rlvr-theory"


def __getattr__(name: str) -> Any:
    """``cli.advantages`` and ``cli.masses``, the modules the commands use, imported on first use."""
    if name in ("advantages", "masses"):
        import importlib

        return importlib.import_module(f"{__package__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def format_frame(df: pd.DataFrame, fmt: str) -> str:
    """Render a DataFrame as ``markdown``, ``csv``, ``latex`` or ``json`` (a list of records).

    Markdown and LaTeX cells go through :func:`rlvr_plumbing.serialize.fmt_number` (6
    significant digits, ``—`` for NaN, ``∞`` for inf; ``$\\infty$`` in LaTeX); CSV writes each
    float as the shortest text that reads back to the same float (Python's ``repr``: ``0.3``, not
    ``0.29999999999999999``); JSON follows :func:`rlvr_plumbing.serialize.dumps`.
    """
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        return dumps(df.to_dict(orient="records"), indent=1)
    cells = [[fmt_number(v) for v in row] for row in df.itertuples(index=False)]
    cols = [str(c) for c in df.columns]
    if fmt == "markdown":
        lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
        return "\n".join(lines) + "\n"
    if fmt == "latex":
        def esc(s: str) -> str:
            s = s.replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("&", "\\&").replace("%", "\\%")
            return s.replace("∞", "$\\infty$").replace("—", "--")
        lines = ["\\begin{tabular}{" + "l" * len(cols) + "}", "\\hline",
                 " & ".join(esc(c) for c in cols) + " \\\\", "\\hline"]
        lines += [" & ".join(esc(c) for c in row) + " \\\\" for row in cells]
        lines += ["\\hline", "\\end{tabular}"]
        return "\n".join(lines) + "\n"
    raise ValueError(f"format must be one of 'markdown', 'csv', 'latex', 'json'; got {fmt!r}")


# ------------------------------------------------------------------ commands
def _cmd_list(args: argparse.Namespace) -> str:
    import pandas as pd

    from . import advantages

    rows = []
    for name, cls in advantages.registry().items():
        params = ", ".join(f"{k}={v}" for k, v in cls.defaults.items())
        rows.append({"name": name, "params": params, "kind": cls.kind,
                     "description": cls.description, "source": cls.source})
    if args.json:
        return dumps(rows, indent=1)
    return format_frame(pd.DataFrame(rows), "markdown")


def _cmd_masses(args: argparse.Namespace) -> str:
    from . import advantages, masses

    kw = runner.parse_params(args.param)
    if args.reward_values is not None:
        kw["reward_values"] = tuple(args.reward_values)
    adv = advantages.get(args.advantage, **kw)
    pa = masses.check_p(args.p)
    G = masses.check_group_size(args.G, adv)
    # the plug-in through masses.plugin: no sympy unless the family's closed form is needed (or
    # --symbolic); the ratios at reward values (0, 1), free of the scale, as masses.table does
    u = masses._unit(adv) or adv
    cf_u, ex_u = masses.plugin(u, pa, G), masses.exact(u, pa, G)
    cf = cf_u if u is adv else masses.plugin(adv, pa, G)
    ex = ex_u if u is adv else masses.exact(adv, pa, G)
    sign, rho, sign_x, rho_x = (float(masses._ratios(u, pa, G, m, use_exact, rho=r))
                                for m, use_exact, r in ((cf_u, False, False), (cf_u, False, True),
                                                        (ex_u, True, False), (ex_u, True, True)))
    out: dict[str, Any] = {
        "advantage": adv.name,
        "params": adv.params,
        "reward_values": list(adv.reward_values),
        "kind": adv.kind,
        "p": args.p,
        "G": args.G,
        "closed_form": {"m_S": float(cf.m_S), "m_F": float(cf.m_F)},
        "exact": {"m_S": float(ex.m_S), "m_F": float(ex.m_F)},
        "sign_ratio": sign,
        "advantage_ratio": rho,
        "sign_ratio_exact": sign_x,
        "advantage_ratio_exact": rho_x,
    }
    if args.symbolic:
        ms, mf = adv.closed_form()
        out["expressions"] = {"m_S": str(ms), "m_F": str(mf)}
    if args.json:
        return dumps(out)

    def f(x: float) -> str:
        return fmt_number(x, 10)

    lines = [f"{adv!r}  ({adv.source}; kind: {adv.kind})"]
    if args.symbolic:
        lines.append(f"closed form: m_S = {out['expressions']['m_S']}    m_F = {out['expressions']['m_F']}")
    lines += [f"p = {f(args.p)}, G = {args.G}",
              f"  closed form (plug-in):  m_S = {f(out['closed_form']['m_S'])}  m_F = {f(out['closed_form']['m_F'])}",
              f"  exact, finite G:        m_S = {f(out['exact']['m_S'])}  m_F = {f(out['exact']['m_F'])}",
              f"  plug-in:  sign ratio m_S/m_F = {f(sign)}   rho = m_S p/(m_F q) = {f(rho)}",
              f"  exact:    sign ratio m_S/m_F = {f(sign_x)}   rho = m_S p/(m_F q) = {f(rho_x)}"]
    if adv.erratum:
        lines.append(f"  note: {adv.erratum}")
    return "\n".join(lines)


def _table_advantages(args: argparse.Namespace) -> list[advantages.Advantage] | None:
    """The ``--advantage NAME [--param k=v ...]`` groups in the order typed (None: all families)."""
    from . import advantages

    chosen = args.advantage or []
    items = list(args.param or [])
    if not chosen:
        if items:
            raise ValueError(f"param must follow the --advantage it applies to "
                             f"(e.g. --advantage asym_grpo --param delta=0.5), got {items[0]!r} before any --advantage")
        return None
    if chosen[0][1] > 0:
        raise ValueError(f"param must follow the --advantage it applies to "
                         f"(e.g. --advantage asym_grpo --param delta=0.5), got {items[0]!r} before any --advantage")
    ends = [start for _, start in chosen[1:]] + [len(items)]
    return [advantages.get(name, **runner.parse_params(items[start:end]))
            for (name, start), end in zip(chosen, ends)]


#: the columns of ``masses.table`` that hold plug-in values (the closed form at p̂ = p), as
#: ``rlvr-theory table`` names them in every format: each mass or ratio column says whether it is
#: the plug-in value or the exact finite-G expectation (``*_exact``, named so by ``masses.table``)
PLUGIN_COLUMNS = {"m_S": "m_S_plugin", "m_F": "m_F_plugin", "sign_ratio": "sign_ratio_plugin",
                  "advantage_ratio": "advantage_ratio_plugin", "balance": "balance_plugin"}


def _cmd_table(args: argparse.Namespace) -> str:
    from . import masses

    ps = args.p if args.p else [0.3, 0.5]
    df = masses.table(ps, args.G, _table_advantages(args)).rename(columns=PLUGIN_COLUMNS)
    if args.format in ("markdown", "latex"):
        df = df.drop(columns=["G"])
    return format_frame(df, args.format)


def _cmd_tail_miss(args: argparse.Namespace) -> str:
    """Pr(A_N) and Pr(B_tau) (F-GRPO Eq. 9, Lemma 3.1) per N; JSON: one object with a "rows" list."""
    import numpy as np
    import pandas as pd

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
        return dumps(out, indent=1)
    text = f"mu = {fmt_number(args.mu)}, tau = {fmt_number(args.tau)}  (F-GRPO Eq. 9 and Lemma 3.1)\n"
    text += format_frame(pd.DataFrame(rows, columns=["N", "active", "tail_miss"]), "markdown")
    if args.peak:
        text += f"peak: N = {out['peak_N']}, tail_miss = {fmt_number(out['peak_value'], 10)}\n"
    return text


# -------------------------------------------------------------------- parser
class _TableAdvantage(argparse.Action):
    """``--advantage NAME`` of ``table``: remembers how many ``--param`` came before it, so
    that the ``--param`` typed after it (and before the next ``--advantage``) are its own."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        chosen = list(getattr(namespace, self.dest) or [])
        chosen.append((values, len(getattr(namespace, "param", None) or [])))
        setattr(namespace, self.dest, chosen)


#: negative numbers in any float spelling (``-1e308``, ``-.5``, ``-inf``): argparse's own pattern
#: knows only ``-1`` and ``-1.5`` and takes ``-1e308`` for an option
def _add_masses_parser(sub: Any) -> None:
    p = sub.add_parser("masses", help="m_S, m_F of one advantage at one solve rate")
    p.add_argument("--advantage", required=True, help="registered name (see `rlvr-theory list`)")
    runner.add_param_option(p, of="advantage")
    p.add_argument("--reward-values", nargs=2, type=float, metavar=("R_W", "R_C"),
                   help="reward of a wrong and of a correct rollout (default 0 1)")
    p.add_argument("--p", type=float, required=True, help="solve rate in [0, 1]")
    p.add_argument("--G", type=int, default=8, help="group size for the exact column (default 8)")
    p.add_argument("--symbolic", action="store_true",
                   help="also print the closed form as an expression in p (and G); loads sympy (~0.5 s)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    runner.add_threads_option(p)
    p.set_defaults(func=_cmd_masses)


def _add_table_parser(sub: Any) -> None:
    p = sub.add_parser(
        "table", help="FADE Table 1 / Table 7 with exact finite-G columns",
        description="Masses of advantage families at solve rates p (FADE Table 1 / Table 7): the plug-in "
                    "columns (*_plugin: the closed form at p̂ = p) and the exact finite-G expectations over "
                    "X ~ Binom(G, p) (*_exact); abs_adv_sum_exact is E[Σ_i |A_i|] per group of G rollouts.  "
                    "Default: every registered family with its default parameters.  "
                    "--advantage NAME (repeatable) chooses families; each --param NAME=VALUE applies to the "
                    "--advantage named just before it, e.g. "
                    "--advantage grpo --advantage asym_grpo --param delta=0.5.")
    p.add_argument("--p", type=float, action="extend", nargs="+", default=[],
                   help="solve rate(s), repeatable (default 0.3 0.5)")
    p.add_argument("--G", type=int, default=8, help="group size (default 8)")
    p.add_argument("--advantage", action=_TableAdvantage, default=None, metavar="NAME",
                   help="a family to tabulate, repeatable (default: all, with default parameters)")
    runner.add_param_option(p, help="parameter of the --advantage named just before it, repeatable "
                                    "(e.g. --advantage asym_grpo --param delta=0.5)")
    p.add_argument("--format", choices=["markdown", "csv", "latex", "json"], default="markdown")
    runner.add_threads_option(p)
    p.set_defaults(func=_cmd_table)


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
    runner.add_threads_option(p)
    p.set_defaults(func=_cmd_tail_miss)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``rlvr-theory``."""
    ap = argparse.ArgumentParser(prog=PROG, description="Closed forms of RLVR advantage functions.")
    sub = ap.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="registered advantages with their parameters and sources")
    p_list.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    p_list.set_defaults(func=_cmd_list)

    _add_masses_parser(sub)
    _add_table_parser(sub)
    _add_tail_miss_parser(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``rlvr-theory``; returns the exit status (2 on bad input, see
    :func:`rlvr_plumbing.runner.run`)."""
    return runner.run(PROG, build_parser, argv)


#: console-script entry point (``pyproject.toml``: ``rlvr_theory.cli:main_exit``)
main_exit = runner.console(PROG, build_parser)


if __name__ == "__main__":  # pragma: no cover
    main_exit()
