"""How the real-program check (tests/integration/test_real_programs.py) compares sdb's profile with
stackprof's: self samples per label, both in Ruby's `rb_profile_frame_full_label` convention. Pure
functions over counts, so that tests/unit/test_profile_compare.py can show the comparison fails on
profiles with wrongly named frames."""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Sequence, Tuple

GC = "(garbage collection)"
# stackprof splits GC by phase under its (garbage collection) frame; sdb has the one frame
STACKPROF_GC = {GC, "(marking)", "(sweeping)"}
TOP = 20
MIN_RHO = 0.9


def fold(label: str) -> str:
    """stackprof's label in sdb's terms: its GC phases are sdb's one GC frame."""
    return GC if label in STACKPROF_GC else label


def ranks(v: Sequence[float]) -> List[float]:
    """1 for the largest; ties share the mean of their ranks."""
    order = sorted(range(len(v)), key=lambda i: -v[i])
    out = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson's over the ranks, ties averaged)."""
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / den if den else 0.0


@dataclass
class Comparison:
    # (the names below say stackprof and sdb: the reference profile and the one compared with it)
    rho: float                      # Spearman over stackprof's top labels, their shares in each profile
    top: List[str]                  # stackprof's top labels, most first
    shares: Dict[str, Tuple[float, float]]      # label -> (stackprof %, sdb %)
    # (sdb's label, its sdb %, stackprof's label): a method sdb names bare where stackprof has its class
    unqualified: List[Tuple[str, float, str]] = field(default_factory=list)
    ref_name: str = "stackprof"
    other: str = "sdb"

    def table(self) -> str:
        return "\n".join(f"{self.shares[n][0]:6.2f} {self.shares[n][1]:6.2f}  {n}" for n in self.top)

    def problems(self, min_rho: float = MIN_RHO) -> List[str]:
        """What fails: an empty list when the two profiles agree."""
        out = []
        if self.rho < min_rho:
            out.append(f"Spearman {self.rho:.3f} < {min_rho} over {self.ref_name}'s top {len(self.top)} self "
                       f"functions ({self.ref_name} %, {self.other} %):\n{self.table()}")
        out += [f"{self.other} says {sdb!r} ({pct:.2f} % of its time) where {self.ref_name} says {sp!r}"
                for sdb, pct, sp in self.unqualified]
        return out


def compare_self(stackprof: Mapping[str, float], sdb: Mapping[str, float], top: int = TOP,
                 ref_name: str = "stackprof", other: str = "sdb") -> Comparison:
    """stackprof's and sdb's self time per label (any unit: each is made shares of its own total).
    rho: over stackprof's `top` labels; unqualified: every label of sdb's that is a method's bare
    name where stackprof gives the method with its class (`convert` for `Html5Converter#convert`)."""
    n_sp, n_sd = sum(stackprof.values()), sum(sdb.values())
    assert n_sp > 0 and n_sd > 0, (n_sp, n_sd)
    names = [n for n, _ in collections.Counter(stackprof).most_common(top)]
    shares = {n: (100 * stackprof.get(n, 0) / n_sp, 100 * sdb.get(n, 0) / n_sd) for n in names}
    rho = spearman([shares[n][0] for n in names], [shares[n][1] for n in names])
    qualified = {n.rsplit(sep, 1)[1]: n for n in stackprof for sep in ("#", ".") if sep in n}
    unqualified = [(n, 100 * t / n_sd, qualified[n]) for n, t in collections.Counter(sdb).most_common()
                   if n in qualified]
    return Comparison(rho, names, shares, unqualified, ref_name, other)
