#!/usr/bin/env python3
"""Kernel counts and GPU time from CubeCL's profiling log, as a Markdown table.

CubeCL (burn's CUDA backend) with `[profiling.logger] level = "basic"` in cubecl.toml launches every kernel, waits
for it and writes one line per launch, `| <duration> | <kernel name>` (the duration as Rust's `Debug` of a
`Duration`: 812ns, 12.5µs, 1.2ms, 1.5s); the summary tables it prints at each sync are skipped.

    kernel_profile.py RUN.log [--units N]              # totals of one run (per unit: divided by N)
    kernel_profile.py SHORT.log LONG.log --units N     # what LONG ran beyond SHORT, per unit

The second form is how a steady state is read: two runs that differ only in length (decoding 8 and 40 tokens;
4 and 12 training updates) share their loading, compilation and warm-up, so LONG - SHORT is N passes or updates
of the steady state. Kernels are grouped by name without generic arguments (`--full`: by the whole name).
"""
import argparse
import re
import sys
from collections import defaultdict

LINE = re.compile(r"^\| (\d+(?:\.\d+)?)(ns|µs|us|ms|s)\s+\| (.+?)\s*$")
SCALE = {"ns": 1e-3, "µs": 1.0, "us": 1.0, "ms": 1e3, "s": 1e6}


def read(path, full):
    """{kernel: [launches, total µs]} of one log."""
    out = defaultdict(lambda: [0, 0.0])
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            name = m.group(3)
            if not full:
                name = name.split("<", 1)[0]
            k = out[name]
            k[0] += 1
            k[1] += float(m.group(1)) * SCALE[m.group(2)]
    return out


def table(short, long_, units, top):
    rows = []
    for name in set(short) | set(long_):
        n = long_.get(name, [0, 0.0])[0] - short.get(name, [0, 0.0])[0]
        us = long_.get(name, [0, 0.0])[1] - short.get(name, [0, 0.0])[1]
        rows.append((name, n / units, us / units))
    total_n = sum(r[1] for r in rows)
    total_us = sum(r[2] for r in rows)
    rows.sort(key=lambda r: -r[2])
    lines = [
        "| kernel | launches per unit | GPU µs per unit | share of GPU time | µs per launch |",
        "|---|---:|---:|---:|---:|",
    ]
    shown = rows[:top] if top else rows
    for name, n, us in shown:
        share = 100 * us / total_us if total_us else 0.0
        per = us / n if n else 0.0
        lines.append(f"| `{name}` | {n:,.1f} | {us:,.1f} | {share:.1f}% | {per:,.2f} |")
    if len(shown) < len(rows):
        n = sum(r[1] for r in rows[len(shown):])
        us = sum(r[2] for r in rows[len(shown):])
        lines.append(f"| ({len(rows) - len(shown)} other kernels) | {n:,.1f} | {us:,.1f} | "
                     f"{100 * us / total_us if total_us else 0:.1f}% | |")
    lines.append(f"| **all** | **{total_n:,.1f}** | **{total_us:,.1f}** | 100% | "
                 f"{total_us / total_n if total_n else 0:,.2f} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("logs", nargs="+", help="one log, or SHORT LONG")
    p.add_argument("--units", type=float, default=1.0, help="passes or updates the table is divided by")
    p.add_argument("--top", type=int, default=25, help="kernels shown (0: all)")
    p.add_argument("--full", action="store_true", help="group by the whole kernel name, generics included")
    a = p.parse_args()
    if len(a.logs) > 2:
        p.error("one log, or two (SHORT LONG)")
    if a.units <= 0:
        p.error("--units must be positive")
    if a.top < 0:
        p.error("--top must be 0 (all) or positive")
    logs = [read(path, a.full) for path in a.logs]
    if not any(logs[-1].values()):
        sys.exit(f"kernel_profile: no profiled kernel launches in {a.logs[-1]} "
                 "(is `[profiling.logger] level` set in cubecl.toml, and did the run use the GPU?)")
    short, long_ = (logs[0], logs[1]) if len(logs) == 2 else ({}, logs[0])
    print(table(short, long_, a.units, a.top))


if __name__ == "__main__":
    main()
