#!/usr/bin/env python3
"""report.py - bench/run.sh's helper: raw rows (latest.csv) -> latest.md, the
gnuplot script for latest.png and phases.png, and (full mode) one line in
history.md.  With --readme README --latest latest.md: copies latest.md's
header, summary, fast-path and phases sections into the README between
<!-- bench:begin --> and <!-- bench:end -->.

Medians and bests per (workload, case, allocator); ratios against hakmem (or
glibc when hakmem was not built).  Any failed or timed-out run turns its cell
into FAIL, so a broken allocator can never show a figure.  The phases workload
is priced per phase as cost_ms = W * sys_ms + (1 - W) * xs (MiB*s resident
above live), computed here from its raw fields, at W = 0.5 unless stated."""
import argparse, csv, math, os, re, statistics

ap = argparse.ArgumentParser()
for opt in ("csv", "out", "tmp", "mode", "rounds", "machine", "versions", "skipped", "seconds", "readme", "latest"):
    ap.add_argument("--" + opt, default="")
A = ap.parse_args()

if A.readme:  # copy latest.md's header, summary, fast-path and phases sections into the README's bench section
    md = open(A.latest).read()
    head, *secs = md.split("\n## ")
    head = head.replace("# hakmem benchmarks", "### Latest run", 1)
    head = re.sub(r"Raw rows: latest\.csv\..*", "Details: bench/results/latest.md.", head)
    pick = lambda title: [sec.rstrip() for sec in secs if sec.startswith(title)]
    parts = [head.rstrip()] + ["#### " + sec for sec in pick("Summary") + pick("Fast path") + pick("Phases:")]
    body = "\n\n".join(parts).replace("](latest.png)", "](bench/results/latest.png)")
    body = body.replace("](phases.png)", "](bench/results/phases.png)") + "\n"
    readme = open(A.readme).read()
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    pre, rest = readme.split(begin, 1)
    post = rest.split(end, 1)[1]
    open(A.readme, "w").write(pre + begin + "\n" + body + end + post)
    raise SystemExit(0)
COLORS = {"hakmem": "#d62728", "hakmem-secure": "#ff9896", "glibc": "#7f7f7f", "mimalloc": "#1f77b4", "jemalloc": "#2ca02c", "tcmalloc": "#ff7f0e",
          "hakmem-w0": "#e377c2", "hakmem-w100": "#8c564b",
          "hakmem-pin0": "#dadaeb", "hakmem-pin1": "#9e9ac8", "hakmem-pin2": "#6a51a3", "hakmem-pin3": "#3f007d"}
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
allocs, pconfigs, cases, groups = [], [], [], {}  # allocators of the main tables; configurations that ran phases
for r in rows:
    names = pconfigs if r["workload"] == "phases" else allocs
    if r["allocator"] not in names:
        names.append(r["allocator"])
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


def round_ratio(key, alloc, field):
    """The median over rounds of alloc's figure over the reference's in the
    same round, or None. Rounds run the allocators in turn, so a machine
    that changes speed between rounds moves both sides of a round's ratio:
    on the 2-core VM cross_thread ran at 4 M/s in some rounds and 8-13 in
    others for every allocator, and one round that changed mode halfway
    turned a ratio of medians from 0.86x into 2.36x."""
    mine = {r["round"]: r for r in groups.get(key, {}).get(alloc, []) if r["status"] == "ok"}
    refs = {r["round"]: r for r in groups.get(key, {}).get(ref, []) if r["status"] == "ok"}
    rs = []
    for rnd, r in mine.items():
        a, b = kv(r["result"]).get(field), kv(refs[rnd]["result"]).get(field) if rnd in refs else None
        if a not in (None, "", "n/a") and b not in (None, "", "n/a") and float(b) > 0:
            rs.append(float(a) / float(b))
    return statistics.median(rs) if rs else None


def human(x):
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.3g} {unit}"
    return f"{x:.3g}"


def mib(kib):
    return "" if kib is None else f"{kib / 1024:.1f}"


def failcell(s):
    return f"**FAIL** {s['fails']}/{s['runs']}"


speed = [k for k in cases if k[0] not in ("memory", "fastpath", "phases")]
memory = [k for k in cases if k[0] == "memory"]
fast = [k for k in cases if k[0] == "fastpath"]
phases = [k for k in cases if k[0] == "phases"]
charts = (["latest.png"] if speed or memory or fast else []) + (["phases.png"] if phases else [])
CHART = "\n![benchmark chart](latest.png)"  # after the last of the sections that go to the README
L = [f"# hakmem benchmarks ({A.mode} mode, {A.rounds} round(s))", "",
     f"- Machine: {A.machine}", f"- Versions: {A.versions}",
     f"- Allocators (LD_PRELOAD, interleaved per run): {', '.join(allocs) or 'none (phases only)'}"]
if phases:
    L.append(f"- Phases workload configurations (LD_PRELOAD and environment, interleaved): {', '.join(pconfigs)}")
L += [f"- Skipped: {A.skipped.replace(';', '; ') or 'none'}",
      (f"- Ratios are against **{ref}**; run" if speed or memory else "- Run") +
      f" time {A.seconds} s. Raw rows: latest.csv. Charts: {', '.join(charts) or 'none'}."]

if speed or memory:
    L += ["", "## Summary: median, and ratio to " + ref, "",
          "Throughput rows: median operations per second (higher is better), and the median over rounds of "
          "allocator / " + ref + " in the same round.  "
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
                q = round_ratio(key, a, field) if rs and not rs["fails"] else None
                cells.append(f"{human(s['med'])}/s" + (f" ({q:.2f}x)" if q is not None else ""))
            else:
                cells.append(f"{s['med']:.1f} %")
        L.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")

if "hakmem-secure" in allocs and ref == "hakmem":  # the price of the hardened build
    med, best = [], []
    for key in speed:
        sec, base = stat(key, "hakmem-secure", "ops_per_sec"), stat(key, "hakmem", "ops_per_sec")
        q = round_ratio(key, "hakmem-secure", "ops_per_sec")
        if sec and base and q and base["best"] and not sec["fails"] and not base["fails"]:
            med.append(q)
            best.append(sec["best"] / base["best"])
    if med:
        def geo(rs):
            return math.exp(sum(math.log(r) for r in rs) / len(rs))

        def word(g):
            return f"{abs(1 - g) * 100:.1f} % {'slower' if g < 1 else 'faster'}"

        L += ["", f"Secure build (libhakmem-secure.so) over hakmem, geometric mean of {len(med)} throughput rows: "
                  f"per-round ratios **{geo(med):.3f}** ({word(geo(med))}), best runs **{geo(best):.3f}** ({word(geo(best))})."]
if (speed or memory) and not fast:
    L.append(CHART)

if speed:
    L += ["", "## Throughput detail", "",
          "ops/s: larson, mid_large_mt = free+malloc replacements; random_mixed = mallocs (each freed); "
          "cross_thread = blocks passed and freed; realloc = realloc calls; large = allocate+touch+free. "
          "Peak RSS is the median of `/usr/bin/time -f %M`; / " + ref + ": the median over rounds of the same round's ratio.", "",
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
        q = round_ratio(key, a, "ops_per_sec") if rs and not rs["fails"] else None
        q = f"{q:.2f}" if q is not None else ""
        L.append(f"| {key[0]} | {key[1]} | {a} | {s['med']:,.0f} | {s['best']:,.0f} | {q} | {mib(s['rss'])} | {s['runs']} |")

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
          "A row counts everything, the benchmark loop's own instructions too; its `in allocator` row "
          "leaves out main's own (the loop, and the PLT jumps callgrind counts in the caller), the same "
          "code for every allocator.", "",
          "| size | " + " | ".join(allocs) + " |", "|---|" + "---:|" * len(allocs)]
    for key in fast:
        for field, label in (("instr_per_pair", key[1]), ("alloc_per_pair", f"{key[1]} in allocator")):
            cells = []
            for a in allocs:
                s = stat(key, a, field)
                cells.append("" if s is None else failcell(s) if s["fails"] or s["med"] is None else f"{s['med']:.1f}")
            L.append(f"| {label} | " + " | ".join(cells) + " |")
    L.append(CHART)

# ---- phases: hakmem's learned strategy versus each pinned strategy and peers --
PH = ["churn", "burst", "idle", "churn2", "burst2", "idle2"]
pins = [c for c in pconfigs if c.startswith("hakmem-pin")]
peers = [c for c in pconfigs if not c.startswith("hakmem")]
STRATEGY = {"0": "default", "1": "speed", "2": "lean", "3": "memory"}


def pruns(c):
    """Configuration c's phases runs: (result dicts of the ok ones, failed, all)."""
    rs = [r for key in phases for r in groups[key].get(c, [])]
    ok = [kv(r["result"]) for r in rs if r["status"] == "ok"]
    return ok, len(rs) - len(ok), len(rs)


def pcost(res, p, w=0.5):
    """cost_ms = W * sys_ms + (1 - W) * MiB*s above live, of one run's phase p (or "total")."""
    if p == "total":
        return sum(pcost(res, q, w) for q in PH)
    return w * float(res[f"p_{p}_sys_ms"]) + (1 - w) * float(res[f"p_{p}_xs"])


def pmed(c, f):
    """Median over c's runs of f(result); None when c did not run, a run failed or a field is missing."""
    ok, fails, _ = pruns(c)
    try:
        return statistics.median([f(r) for r in ok]) if ok and not fails else None
    except (KeyError, ValueError, ZeroDivisionError):
        return None


def pcell(c, f, fmt=None, bold=False):
    ok, fails, n = pruns(c)
    if not n:
        return ""
    if fails:
        return f"**FAIL** {fails}/{n}"
    v = pmed(c, f)
    if v is None:
        return "n/a"
    t = fmt(v) if fmt else (f"{v:.1f}" if abs(v) < 100 else f"{v:.0f}")
    return f"**{t}**" if bold else t


def excess(p):  # average resident MiB above live in phase p
    return lambda r: float(r[f"p_{p}_rss"]) - float(r[f"p_{p}_live"])


def us_per_block(p):  # wall time per block allocated in phase p
    return lambda r: float(r[f"p_{p}_wall_ms"]) * 1e3 / float(r[f"p_{p}_ops"])


def cost_of(p, w=0.5):
    return lambda r: pcost(r, p, w)


def best_pinned(p):
    """The pinned configuration with the lowest median cost of phase p (or "total"), and that cost; (None, None) if none ran."""
    pv = {c: pmed(c, cost_of(p)) for c in pins}
    pv = {c: v for c, v in pv.items() if v is not None}
    best = min(pv, key=pv.get) if pv else None
    return best, pv.get(best)


if phases:
    k0 = kv(next((r["result"] for key in phases for rs in groups[key].values() for r in rs if r["status"] == "ok"), ""))
    plen = k0.get("phase_s", "?")
    rounds = max(pruns(c)[2] for c in pconfigs)
    L += ["", "## Phases: learned strategy versus pinned strategies and peers", "",
          f"`phases` ({plen} s per phase, {rounds} round(s)): churn 16-1024 B, bursts of 256 KiB-32 MiB blocks, idle "
          "holding 1 MiB, churn 1-32 KiB, 64 KiB-4 MiB slots replaced, idle. Cell: median cost of the phase in ms at "
          "weight W = 50, `0.5 x system ms + 0.5 x MiB*s resident above live` (lower is better). "
          "`hakmem` learns at W = 50, `hakmem-w0`/`-w100` learn at W = 0/100 (`HAKMEM_LEARN_WEIGHT`), "
          "`hakmem-pinK` runs strategy K only (`HAKMEM_LEARN=0 HAKMEM_LEARN_PIN=K`: "
          + ", ".join(f"{k} {v}" for k, v in STRATEGY.items()) + "). **Bold**: the best pinned strategy of the row; "
          "last column: learning over it (below 1.00: learning beat every fixed strategy).", "",
          "| phase | " + " | ".join(pconfigs) + " | learn / best pinned |", "|---|" + "---:|" * (len(pconfigs) + 1)]
    oracle = 0.0
    for p in PH + ["total"]:
        best, bv = best_pinned(p)
        if p != "total":
            oracle = oracle + bv if best and oracle is not None else None
        learn = pmed("hakmem", cost_of(p))
        ratio = f"{learn / bv:.2f} ({best[len('hakmem-'):]})" if best and learn is not None and bv > 0 else "n/a"
        L.append(f"| {p} | " + " | ".join(pcell(c, cost_of(p), bold=c == best) for c in pconfigs) + f" | {ratio} |")
    learn = pmed("hakmem", cost_of("total"))
    if oracle and learn is not None:
        L += ["", f"Best pinned strategy chosen afresh in each phase (an oracle's schedule), summed: {oracle:.1f} ms; "
                  f"learning: {learn:.1f} ms ({learn / oracle:.2f}x)."]
    # hakmem-told: learning, and the program calls malloc_trim(0) entering each idle phase
    told = {p: pmed("hakmem-told", cost_of(p)) for p in ("idle", "idle2")}
    if None not in told.values() and pins:
        parts = []
        for p, v in told.items():
            b, bv = best_pinned(p)
            if b and bv > 0:
                parts.append(f"{p} {v:.1f} against {bv:.1f} ({b[len('hakmem-'):]}, {v / bv:.2f}x)")
        L += ["", "Told when each idle phase starts (`hakmem-told`: learning at W = 50, and the program calls "
                  "`malloc_trim(0)` entering each idle phase), the learner's idle cost against the best pinned "
                  "strategy's: " + "; ".join(parts) + ". The best pinned strategy of an idle phase kept nothing in "
                  "the burst before it; one that served the burst fast purges the burst's cache in the idle phase, "
                  "told or not."]
    # (a) weight 0: memory held in the idle phases, against each peer
    L += ["", "Claims, computed from the medians:", ""]
    def claim_inputs(cfg, fig, phases, label):
        """cfg's medians of fig in phases, or None after an n/a line."""
        vals = {p: pmed(cfg, fig(p)) for p in phases}
        if cfg in pconfigs and None not in vals.values() and peers:
            return vals
        why = f"{cfg} did not run" if cfg not in pconfigs else "no peer ran" if not peers else f"{cfg} failed or lacks fields"
        L.append(f"- {label}: n/a ({why}).")
        return None

    idle = ("idle", "idle2")
    w0 = claim_inputs("hakmem-w0", excess, idle, "(a) weight 0 (`hakmem-w0`), idle phases, average resident MiB above live")
    if w0 is not None:
        worse = []
        vals = []
        for c in peers:
            pv = {p: pmed(c, excess(p)) for p in idle}
            vals.append(f"{c} " + " / ".join(("FAIL" if pruns(c)[1] else "n/a") if pv[p] is None else f"{pv[p]:.1f}" for p in idle))
            worse += [f"{c} {p}" for p in idle if pv[p] is None or not w0[p] < pv[p]]
        L.append("- (a) weight 0 (`hakmem-w0`), idle / idle2, average resident MiB above live (lower is better): "
                 f"hakmem-w0 {w0['idle']:.1f} / {w0['idle2']:.1f}; " + "; ".join(vals) + ": "
                 + ("**met** (below every peer in both idle phases)." if not worse else
                    f"**not met** (not below: {', '.join(worse)})."))
    # (b) weight 100: time of the burst phases, against the best peer
    burst = ("burst", "burst2")
    w100 = claim_inputs("hakmem-w100", us_per_block, burst, "(b) weight 100 (`hakmem-w100`), burst phases, wall time per block")
    if w100 is not None:
        parts, miss = [], []
        for p in burst:
            pv = {c: pmed(c, us_per_block(p)) for c in peers}
            pv = {c: v for c, v in pv.items() if v is not None}
            if not pv:
                parts.append(f"{p}: hakmem-w100 {w100[p]:.1f}, no peer figure")
                miss.append(p)
                continue
            bp = min(pv, key=pv.get)
            parts.append(f"{p}: hakmem-w100 {w100[p]:.1f} vs best peer {bp} {pv[bp]:.1f} ({w100[p] / pv[bp]:.2f}x)")
            if not w100[p] <= pv[bp]:
                miss.append(p)
        L.append("- (b) weight 100 (`hakmem-w100`), burst phases, wall µs per block allocated (lower is better; "
                 "peers that failed do not count): "
                 + "; ".join(parts) + ": " + ("**met** (at most the best peer's time in both)." if not miss else
                                               f"**not met** (slower than the best peer in {', '.join(miss)})."))
    L += ["", "![phases chart](phases.png)"]

    L += ["", "## Phases detail", "",
          "Whole run per configuration at three weights (medians): W = 0 prices only MiB*s above live, W = 100 only "
          "system ms; and wall µs per block in the burst phases.", "",
          "| configuration | W = 0 (MiB*s) | W = 50 | W = 100 (sys ms) | burst µs/block | burst2 µs/block | runs |",
          "|---|---:|---:|---:|---:|---:|---:|"]
    for c in pconfigs:
        L.append(f"| {c} | " + " | ".join([pcell(c, cost_of("total", w)) for w in (0, 0.5, 1)] +
                                          [pcell(c, us_per_block(p)) for p in burst]) + f" | {pruns(c)[2]} |")
    L += ["", "Per phase (medians): ops = blocks allocated; sys ms and minor faults from getrusage; MiB*s = resident "
              "above live integrated over the phase; RSS and live = averages.", "",
          "| phase | configuration | ops | wall ms | sys ms | minor faults | MiB*s above live | avg RSS MiB | avg live MiB | cost W = 50 |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in PH:
        for c in pconfigs:
            f = lambda n: (lambda r: float(r[f"p_{p}_{n}"]))
            L.append(f"| {p} | {c} | " + " | ".join(
                [pcell(c, f("ops"), lambda v: f"{v:,.0f}"), pcell(c, f("wall_ms"), lambda v: f"{v:.0f}"),
                 pcell(c, f("sys_ms")), pcell(c, f("flt"), lambda v: f"{v:,.0f}"), pcell(c, f("xs")),
                 pcell(c, f("rss")), pcell(c, f("live")), pcell(c, cost_of(p))]) + " |")
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
def speed_label(k):  # the workload, and its threads (and mid_large_mt's cycles) where it has several cases
    parts = k[1].split(", ")
    many = sum(c[0] == k[0] for c in speed) > 1
    return k[0].replace("_", "-") + (" " + parts[0] if many else "") + (" " + parts[-1] if k[0] == "mid_large_mt" else "")


panels = [("latest-speed.dat", speed, "ops_per_sec", speed_label, rel_glibc,
           "Throughput relative to glibc (higher is better)", "x glibc", ""),
          ("latest-mem.dat", memory, "overhead_pct", lambda k: k[1], plain,
           "Resident overhead over requested bytes (lower is better)", "overhead %", "%.1f"),
          ("latest-fast.dat", fast, "instr_per_pair", lambda k: k[1], plain,
           "Instructions per malloc+free pair (lower is better)", "instructions", "%.0f")]
panels = [p for p in panels if p[1]]
n = len(allocs)
gp = []
if panels:
    gp += [f'set terminal pngcairo size {620 * len(panels)},600 font "Sans,10"',
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

# phases.png: cost per phase at W = 50, grouped by phase, hakmem learning, each pinned strategy, each peer
if phases:
    series = [c for c in pconfigs if c == "hakmem" or c in pins or c in peers]
    m = len(series)
    path = os.path.join(A.tmp, "phases.dat")
    marks = []
    table = [[pmed(c, cost_of(p)) for c in series] for p in PH + ["total"]]
    low = min([v for row in table for v in row if v is not None and v > 0] or [1])
    floor = 10 ** math.floor(math.log10(low * 0.8))  # log scale: the axis starts at a power of 10 below the least cost
    with open(path, "w") as f:
        f.write('"phase" ' + " ".join(f'"{c}"' for c in series) + "\n")
        for gi, p in enumerate(PH + ["total"]):
            for ci, c in enumerate(series):
                if table[gi][ci] is None:
                    x = gi + (ci - (m - 1) / 2) / (m + 1)
                    marks.append(f'set label "{"FAIL" if pruns(c)[1] else "n/a"}" at {x:.3f}, graph 0.03 center rotate by 90 '
                                 'tc rgb "red" font ",9"')
            f.write(f'"{p}" ' + " ".join(f"{max(v or 0, floor):.4g}" for v in table[gi]) + "\n")
    gp += ["reset", 'set terminal pngcairo size 1280,600 font "Sans,10"', f'set output "{os.path.join(A.out, "phases.png")}"',
           f'set title "phases ({plen} s each, {rounds} round(s)): median cost per phase at W = 50, '
           f'0.5 x system ms + 0.5 x MiB*s above live (lower is better)" noenhanced',
           "set style data histograms", "set style histogram clustered gap 1", "set style fill solid 0.9 border -1",
           "set boxwidth 0.9", "set grid ytics", "set key below horizontal maxcols 12 noenhanced samplen 2", "set xtics noenhanced",
           "set logscale y", f"set yrange [{floor:g}:*]", 'set ylabel "cost, ms (log scale)"'] + marks
    gp.append(f'plot for [i=2:{m + 1}] "{path}" using i:xtic(1) title columnheader(i) '
              f'lc rgb word("{" ".join(COLORS.get(c, "#9467bd") for c in series)}", i-1)')
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
        others = {a: v for a, v in good.items() if a != "hakmem"}
        if key in speed:  # the same per-round ratios as the tables
            others = {a: q for a in others if (q := round_ratio(key, a, field)) is not None}
        if "hakmem" in good and others:
            bp = better(others, key=others.get)
            r = 1 / others[bp] if key in speed else None
            parts.append(f"{name}: hakmem {r:.2f}x best peer ({bp})" if r is not None else
                         f"{name}: hakmem {good['hakmem']:.1f} % vs {bp} {others[bp]:.1f} %")
        elif good:
            bp = better(good, key=good.get)
            parts.append(f"{name}: best {bp}")
    for key in fast:
        s = stat(key, "hakmem", "instr_per_pair")
        if s and s["med"] is not None:
            a = stat(key, "hakmem", "alloc_per_pair")
            parts.append(f"fastpath {key[1]}: {s['med']:.0f} instr" +
                         (f" ({a['med']:.0f} in allocator)" if a and a["med"] is not None else ""))
    if phases:  # whole run at W = 50: learning against the best pinned strategy and the best peer
        tot = {c: pmed(c, cost_of("total")) for c in pconfigs}
        tot = {c: v for c, v in tot.items() if v is not None}
        bpin = min((c for c in tot if c in pins), key=tot.get, default=None)
        bpeer = min((c for c in tot if c in peers), key=tot.get, default=None)
        if "hakmem" in tot:
            parts.append(f"phases cost: hakmem {tot['hakmem']:.0f} ms"
                         + (f", {tot['hakmem'] / tot[bpin]:.2f}x best pinned ({bpin[7:]})" if bpin else "")
                         + (f", {tot['hakmem'] / tot[bpeer]:.2f}x best peer ({bpeer})" if bpeer else ""))
        elif "hakmem" in pconfigs:
            parts.append("phases: hakmem FAIL")
    line = f"- {A.machine.split('; ')[-1]} | {A.versions.split(', ')[-1]} | {A.rounds} rounds | " + "; ".join(parts)
    hist = os.path.join(A.out, "history.md")
    new = not os.path.exists(hist)
    with open(hist, "a") as f:
        if new:
            f.write("# Benchmark history (one line per `bench/run.sh --full`)\n\n")
        f.write(line + "\n")
