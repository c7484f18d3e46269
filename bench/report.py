#!/usr/bin/env python3
"""report.py - bench/run.sh's helper: raw rows (latest.csv) -> latest.md, the
gnuplot script for latest.png, and (full mode) one line in history.md.

Medians and bests per (workload, case, allocator); ratios against hakmem (or
glibc when hakmem was not built).  Any failed or timed-out run turns its cell
into FAIL, so a broken allocator can never show a figure."""
import argparse, csv, math, os, statistics

ap = argparse.ArgumentParser()
for opt in ("csv", "out", "tmp", "mode", "rounds", "machine", "versions", "skipped", "seconds", "readme", "latest"):
    ap.add_argument("--" + opt, default="")
A = ap.parse_args()

if A.readme:  # copy latest.md's header, summary and fast-path tables into the README's bench section
    md = open(A.latest).read()
    head = md.split("## Throughput detail")[0].replace("# hakmem benchmarks", "### Latest run")
    head = head.replace("## Summary", "#### Summary").replace("Raw rows: latest.csv. Chart: latest.png.",
                                                                "Details: bench/results/latest.md; chart: bench/results/latest.png.")
    fast = md.split("## Fast path", 1)[1] if "## Fast path" in md else ""
    body = head.rstrip() + ("\n\n#### Fast path" + fast.rstrip() if fast else "") + "\n\n![benchmark chart](bench/results/latest.png)\n"
    readme = open(A.readme).read()
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    pre, rest = readme.split(begin, 1)
    post = rest.split(end, 1)[1]
    open(A.readme, "w").write(pre + begin + "\n" + body + end + post)
    raise SystemExit(0)
COLORS = {"hakmem": "#d62728", "hakmem-secure": "#ff9896", "glibc": "#7f7f7f", "mimalloc": "#1f77b4", "jemalloc": "#2ca02c", "tcmalloc": "#ff7f0e"}
DESC = {
    "larson": "server simulation, blocks freed by the next thread",
    "random_mixed": "random malloc/free mix, private slots",
    "mid_large_mt": "8-32 KiB churn, 4 threads",
    "cross_thread": "producer allocates, consumer frees",
    "realloc": "buffers grown by small reallocs",
    "large": "64 KiB-64 MiB blocks, every page touched",
}


def kv(s):
    return dict(t.split("=", 1) for t in s.split() if "=" in t)


rows = list(csv.DictReader(open(A.csv)))
allocs, cases, groups = [], [], {}
for r in rows:
    if r["allocator"] not in allocs:
        allocs.append(r["allocator"])
    key = (r["workload"], r["case"])
    if key not in groups:
        cases.append(key)
        groups[key] = {}
    groups[key].setdefault(r["allocator"], []).append(r)
ref = "hakmem" if "hakmem" in allocs else "glibc"


def stat(key, alloc, field, best=max):
    """(median, best, fails, runs, median peak rss) of one metric, or None."""
    runs = groups.get(key, {}).get(alloc, [])
    if not runs:
        return None
    ok = [r for r in runs if r["status"] == "ok"]
    vals = [float(kv(r["result"])[field]) for r in ok if kv(r["result"]).get(field, "n/a") not in ("", "n/a")]
    rss = [float(r["peak_rss_kib"]) for r in ok if r["peak_rss_kib"]]
    return dict(med=statistics.median(vals) if vals else None, best=best(vals) if vals else None,
                fails=len(runs) - len(ok), runs=len(runs), rss=statistics.median(rss) if rss else None)


def human(x):
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.3g} {unit}"
    return f"{x:.3g}"


def mib(kib):
    return "" if kib is None else f"{kib / 1024:.1f}"


def failcell(s):
    return f"**FAIL** {s['fails']}/{s['runs']}"


speed = [k for k in cases if k[0] not in ("memory", "fastpath")]
memory = [k for k in cases if k[0] == "memory"]
fast = [k for k in cases if k[0] == "fastpath"]
L = [f"# hakmem benchmarks ({A.mode} mode, {A.rounds} round(s))", "",
     f"- Machine: {A.machine}", f"- Versions: {A.versions}",
     f"- Allocators (LD_PRELOAD, interleaved per run): {', '.join(allocs)}",
     f"- Skipped: {A.skipped.replace(';', '; ') or 'none'}",
     f"- Ratios are against **{ref}**; run time {A.seconds} s. Raw rows: latest.csv. Chart: latest.png.", ""]

L += ["## Summary: median, and ratio to " + ref, "",
      "Throughput rows: operations per second (higher is better; ratio = allocator / " + ref + ").  "
      "Memory rows: resident overhead over the bytes requested (lower is better).", "",
      "| workload | case | " + " | ".join(allocs) + " |", "|---|---|" + "---:|" * len(allocs)]
for key in speed + memory:
    field = "ops_per_sec" if key in speed else "overhead_pct"
    rs = stat(key, ref, field)
    cells = []
    for a in allocs:
        s = stat(key, a, field)
        if s is None:
            cells.append("")
        elif s["fails"] or s["med"] is None:
            cells.append(failcell(s))
        elif key in speed:
            ratio = f" ({s['med'] / rs['med']:.2f}x)" if rs and rs["med"] and not rs["fails"] else ""
            cells.append(f"{human(s['med'])}/s{ratio}")
        else:
            cells.append(f"{s['med']:.1f} %")
    L.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")

if "hakmem-secure" in allocs and ref == "hakmem":  # the price of the hardened build
    med, best = [], []
    for key in speed:
        sec, base = stat(key, "hakmem-secure", "ops_per_sec"), stat(key, "hakmem", "ops_per_sec")
        if sec and base and sec["med"] and base["med"] and not sec["fails"] and not base["fails"]:
            med.append(sec["med"] / base["med"])
            best.append(sec["best"] / base["best"])
    if med:
        def geo(rs):
            return math.exp(sum(math.log(r) for r in rs) / len(rs))

        def word(g):
            return f"{abs(1 - g) * 100:.1f} % {'slower' if g < 1 else 'faster'}"

        L += ["", f"Secure build (libhakmem-secure.so) over hakmem, geometric mean of {len(med)} throughput rows: "
                  f"medians **{geo(med):.3f}** ({word(geo(med))}), best runs **{geo(best):.3f}** ({word(geo(best))})."]

L += ["", "## Throughput detail", "",
      "ops/s: larson, mid_large_mt = free+malloc replacements; random_mixed = mallocs (each freed); "
      "cross_thread = blocks passed and freed; realloc = realloc calls; large = allocate+touch+free. "
      "Peak RSS is the median of `/usr/bin/time -f %M`.", "",
      f"| workload | case | allocator | median ops/s | best ops/s | / {ref} | peak RSS MiB | runs |",
      "|---|---|---|---:|---:|---:|---:|---:|"]
for key in speed:
    rs = stat(key, ref, "ops_per_sec")
    for a in allocs:
        s = stat(key, a, "ops_per_sec")
        if s is None:
            continue
        if s["fails"] or s["med"] is None:
            L.append(f"| {key[0]} | {key[1]} | {a} | {failcell(s)} | | | | {s['runs']} |")
            continue
        ratio = f"{s['med'] / rs['med']:.2f}" if rs and rs["med"] and not rs["fails"] else ""
        L.append(f"| {key[0]} | {key[1]} | {a} | {s['med']:,.0f} | {s['best']:,.0f} | {ratio} | {mib(s['rss'])} | {s['runs']} |")

if memory:
    L += ["", "## Memory detail", "",
          "Resident memory above the baseline read before the first allocation (/proc/self/statm), medians. "
          "live: while all blocks live; freed: right after freeing them; settled: after settle_ms; "
          "trimmed: after malloc_trim(0) (n/a when the allocator has no malloc_trim of its own).", "",
          f"| case | allocator | overhead % | best % | live MiB | freed MiB | settled MiB | trimmed MiB | peak RSS MiB | runs |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key in memory:
        for a in allocs:
            s = stat(key, a, "overhead_pct", best=min)
            if s is None:
                continue
            if s["fails"] or s["med"] is None:
                L.append(f"| {key[1]} | {a} | {failcell(s)} | | | | | | | {s['runs']} |")
                continue
            f = {n: stat(key, a, n) for n in ("live_kib", "freed_kib", "settled_kib", "trimmed_kib")}
            cell = {n: (mib(v["med"]) if v and v["med"] is not None else "n/a") for n, v in f.items()}
            L.append(f"| {key[1]} | {a} | {s['med']:.1f} | {s['best']:.1f} | {cell['live_kib']} | {cell['freed_kib']} | "
                     f"{cell['settled_kib']} | {cell['trimmed_kib']} | {mib(s['rss'])} | {s['runs']} |")

if fast:
    L += ["", "## Fast path: instructions per malloc+free pair", "",
          "`valgrind --tool=callgrind`, batches of 64 mallocs then 64 frees of one size; "
          "(count(iters2) - count(iters1)) / (64 * (iters2 - iters1)), so start-up cancels. "
          "Includes the benchmark loop's own few instructions per pair.", "",
          "| size | " + " | ".join(allocs) + " |", "|---|" + "---:|" * len(allocs)]
    for key in fast:
        cells = []
        for a in allocs:
            s = stat(key, a, "instr_per_pair")
            cells.append("" if s is None else failcell(s) if s["fails"] or s["med"] is None else f"{s['med']:.1f}")
        L.append(f"| {key[1]} | " + " | ".join(cells) + " |")
open(os.path.join(A.out, "latest.md"), "w").write("\n".join(L) + "\n")

# ---- chart: three panels of grouped bars, one colour per allocator -----------
def dat(name, keys, field, label, scale, missing):
    path = os.path.join(A.tmp, name)
    fails = []
    with open(path, "w") as f:
        f.write('"group" ' + " ".join(f'"{a}"' for a in allocs) + "\n")
        for gi, key in enumerate(keys):
            vals = []
            for ai, a in enumerate(allocs):
                s = stat(key, a, field)
                v = scale(key, s)
                if s and (s["fails"] or s["med"] is None):
                    fails.append((gi, ai))
                vals.append(missing if v is None else f"{v:.4g}")  # gnuplot rejects an all-NaN column
            f.write(f'"{label(key)}" ' + " ".join(vals) + "\n")
    return path, fails


def rel_glibc(key, s):
    g = stat(key, "glibc", "ops_per_sec")
    if not s or s["fails"] or s["med"] is None or not g or not g["med"] or g["fails"]:
        return None
    return s["med"] / g["med"]


plain = lambda key, s: None if not s or s["fails"] or s["med"] is None else s["med"]
panels = [("latest-speed.dat", speed, "ops_per_sec", lambda k: k[0].replace("_", "-") + (" " + k[1].split(", ")[-1] if k[0] == "mid_large_mt" else ""), rel_glibc,
           "Throughput relative to glibc (higher is better)", "x glibc", ""),
          ("latest-mem.dat", memory, "overhead_pct", lambda k: k[1], plain,
           "Resident overhead over requested bytes (lower is better)", "overhead %", "%.1f"),
          ("latest-fast.dat", fast, "instr_per_pair", lambda k: k[1], plain,
           "Instructions per malloc+free pair (lower is better)", "instructions", "%.0f")]
panels = [p for p in panels if p[1]]
n = len(allocs)
gp = [f'set terminal pngcairo size {620 * len(panels)},600 font "Sans,10"',
      f'set output "{os.path.join(A.out, "latest.png")}"',
      f'set multiplot layout 1,{len(panels)} title "hakmem benchmarks ({A.mode}, {A.rounds} round(s)): '
      f'{A.machine.replace(chr(34), "")}"',
      "set style data histograms", "set style histogram clustered gap 1", "set style fill solid 0.9 border -1",
      "set boxwidth 0.9", "set grid ytics", "set key below horizontal", "set xtics rotate by -25 noenhanced",
      "set yrange [0:*]", "set offsets 0,0,graph 0.08,0"]
for name, keys, field, label, scale, title, ylabel, fmt in panels:
    path, fails = dat(name, keys, field, label, scale, "1" if field == "instr_per_pair" else "0")
    gp += [f'set title "{title}"', f'set ylabel "{ylabel}"', "unset label"]
    if scale is rel_glibc:  # clip outliers at 4x so the others stay readable; print their value
        top = 4.0
        vals = [[rel_glibc(k, stat(k, a, field)) for a in allocs] for k in keys]
        if any(v and v > top for row in vals for v in row):
            gp.append(f"set yrange [0:{top}]")
            for gi, row in enumerate(vals):
                for ai, v in enumerate(row):
                    if v and v > top:
                        x = gi + (ai - (n - 1) / 2) / (n + 1)
                        gp.append(f'set label "{v:.1f}x" at {x:.3f}, graph 0.95 right front offset -0.8,0 font ",10"')
    for gi, ai in fails:  # a failed run is marked where its bar would be
        x = gi + (ai - (n - 1) / 2) / (n + 1)
        gp.append(f'set label "FAIL" at {x:.3f}, graph 0.03 center rotate by 90 tc rgb "red" font ",9"')
    extra = ""
    if scale is rel_glibc:
        extra = ", 1 with lines dt 2 lc rgb 'black' notitle"
    else:  # absolute figures: print each value above its bar (skip 1: the header row)
        cond = "> 1" if field == "instr_per_pair" else "!= 0"
        extra = (f', for [i=2:{n + 1}] "{path}" skip 1 using ($0+(i-2-{(n - 1) / 2})/{n + 1}.0):i:(column(i) {cond} ? sprintf("{fmt}",column(i)) : "") '
                 'with labels offset 0,0.6 font ",8" notitle')
    if field == "instr_per_pair":  # spans 50..2000: log scale, DESIGN's target of 40 as a line
        gp += ["set logscale y", "set yrange [10:*]"]
        extra += ", 40 with lines dt 2 lc rgb 'red' title 'target 40'"
    gp.append(f'plot for [i=2:{n + 1}] "{path}" using i:xtic(1) title columnheader(i) '
              f'lc rgb word("{" ".join(COLORS.get(a, "#9467bd") for a in allocs)}", i-1){extra}')
    gp += ["unset logscale y", "set yrange [0:*]"]
gp.append("unset multiplot")
open(os.path.join(A.tmp, "latest.gp"), "w").write("\n".join(gp) + "\n")

# ---- history: one dated line per full run -------------------------------------
if A.mode == "full":
    parts = []
    for key in speed + memory:
        field, better = ("ops_per_sec", max) if key in speed else ("overhead_pct", min)
        st = {a: stat(key, a, field) for a in allocs}
        good = {a: s["med"] for a, s in st.items() if s and not s["fails"] and s["med"] is not None}
        name = key[0] if key in speed else f"memory {key[1]}"
        if key in speed and sum(k[0] == key[0] for k in speed) > 1:
            name += f" ({key[1].split(', ')[-1]})"
        if "hakmem" in allocs and "hakmem" not in good:
            parts.append(f"{name}: hakmem FAIL")
            continue
        peers = {a: v for a, v in good.items() if a != "hakmem"}
        if "hakmem" in good and peers:
            bp = better(peers, key=peers.get)
            r = good["hakmem"] / peers[bp] if key in speed else None
            parts.append(f"{name}: hakmem {r:.2f}x best peer ({bp})" if r is not None else
                         f"{name}: hakmem {good['hakmem']:.1f} % vs {bp} {peers[bp]:.1f} %")
        elif good:
            bp = better(good, key=good.get)
            parts.append(f"{name}: best {bp}")
    for key in fast:
        s = stat(key, "hakmem", "instr_per_pair")
        if s and s["med"] is not None:
            parts.append(f"fastpath {key[1]}: {s['med']:.0f} instr")
    line = f"- {A.machine.split('; ')[-1]} | {A.versions.split(', ')[-1]} | {A.rounds} rounds | " + "; ".join(parts)
    hist = os.path.join(A.out, "history.md")
    new = not os.path.exists(hist)
    with open(hist, "a") as f:
        if new:
            f.write("# Benchmark history (one line per `bench/run.sh --full`)\n\n")
        f.write(line + "\n")
