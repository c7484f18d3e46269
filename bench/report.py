#!/usr/bin/env python3
"""report.py - bench/run.sh's helper: raw rows (latest.csv, and the syscall
pass's latest-syscalls.csv) -> latest.md, the gnuplot script for latest.png
and phases.png, and (full mode) one line in history.md.  With --readme README
--latest latest.md: copies latest.md's header, summary, fast-path, phases and
misses sections into the README between <!-- bench:begin --> and
<!-- bench:end -->.

Medians and bests per (workload, case, allocator); ratios against hakmem (or
glibc when hakmem was not built), each the median over rounds of the ratio
within a round.  Any failed or timed-out run turns its cell into FAIL, so a
broken allocator can never show a figure.  Every throughput and memory row is
also judged against the best peer: hakmem misses a row when it is more than
PASS_TIME slower than the fastest peer, or holds more than PASS_RSS times the
leanest peer's peak resident memory (above SMALL_RSS_KIB).  The phases
workload is priced per phase as cost_ms = W * sys_ms + (1 - W) * xs (MiB*s
resident above live), computed here from its raw fields, at W = 0.5 unless
stated."""
import argparse
import csv
import math
import os
import re
import statistics

COLORS = {"hakmem": "#d62728", "hakmem-secure": "#ff9896", "hakmem-profile": "#bcbd22", "glibc": "#7f7f7f", "mimalloc": "#1f77b4",
          "jemalloc": "#2ca02c", "tcmalloc": "#ff7f0e", "hakmem-w0": "#e377c2", "hakmem-w100": "#8c564b",
          "hakmem-pin0": "#dadaeb", "hakmem-pin1": "#9e9ac8", "hakmem-pin2": "#6a51a3", "hakmem-pin3": "#3f007d"}
PEERS = ("glibc", "mimalloc", "jemalloc", "tcmalloc")
PASS_TIME = 1.10        # hakmem's time over the fastest peer's
PASS_RSS = 1.10         # hakmem's peak RSS over the leanest peer's ...
SMALL_RSS_KIB = 8192    # ... unless hakmem's is below this
SCALING_TARGET = 1.25   # random_sizes: time per op at the largest heap over the smallest
BUSY_PCT = 25           # a run during which other programs took more of the processors shared them
PH = ["churn", "burst", "idle", "churn2", "burst2", "idle2"]
STRATEGY = {"0": "default", "1": "speed", "2": "lean", "3": "memory"}
CHART = "\n![benchmark chart](latest.png)"  # after the last of the sections that go to the README


def kv(s):
    return dict(t.split("=", 1) for t in s.split() if "=" in t)


def human(x):
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.3g} {unit}"
    return f"{x:.3g}"


def mib(kib):
    return "" if kib is None else f"{kib / 1024:.1f}"


def failcell(s):
    return f"**FAIL** {s['fails']}/{s['runs']}"


def section(title, *paragraphs):
    """A latest.md section's opening lines: its title and paragraphs."""
    return ["", f"## {title}"] + [x for par in paragraphs for x in ("", par)]


def table(cols, left=1):
    """A table's header: the column names, the first `left` aligned left, the rest right."""
    return ["", "| " + " | ".join(cols) + " |", "|" + "---|" * left + "---:|" * (len(cols) - left)]


def median_or_none(vals):
    return statistics.median(vals) if vals else None


class Runs:
    """The rows of one run, grouped by case (workload, label) and allocator."""

    def __init__(self, rows):
        self.allocs, self.pconfigs, self.cases, self.groups = [], [], [], {}
        for r in rows:
            names = self.pconfigs if r["workload"] == "phases" else self.allocs
            if r["allocator"] not in names:
                names.append(r["allocator"])
            key = (r["workload"], r["case"])
            if key not in self.groups:
                self.cases.append(key)
                self.groups[key] = {}
            self.groups[key].setdefault(r["allocator"], []).append(r)
        self.ref = "hakmem" if "hakmem" in self.allocs else "glibc"
        self.speed = [k for k in self.cases if k[0] not in ("memory", "fastpath", "phases")]
        self.memory = [k for k in self.cases if k[0] == "memory"]
        self.fast = [k for k in self.cases if k[0] == "fastpath"]
        self.phases = [k for k in self.cases if k[0] == "phases"]
        self.peers = [a for a in self.allocs if a in PEERS]

    def ok_runs(self, key, alloc):
        return [r for r in self.groups.get(key, {}).get(alloc, []) if r["status"] == "ok"]

    def stat(self, key, alloc, field, best=max):
        """(median, best, fails, runs, median peak rss) of one metric, or None."""
        runs = self.groups.get(key, {}).get(alloc, [])
        if not runs:
            return None
        ok = self.ok_runs(key, alloc)
        vals = [float(kv(r["result"])[field]) for r in ok if kv(r["result"]).get(field, "n/a") not in ("", "n/a")]
        rss = [v for v in (peak_rss(r) for r in ok) if v is not None]
        return dict(med=median_or_none(vals), best=best(vals) if vals else None,
                    fails=len(runs) - len(ok), runs=len(runs), rss=median_or_none(rss))

    def round_ratio(self, key, alloc, field, ref=None):
        """The median over rounds of alloc's figure over ref's (default: the
        report's reference) in the same round, or None.  Rounds run the
        allocators in turn, so a machine that changes speed between rounds
        moves both sides of a round's ratio alike; a ratio of medians mixes
        rounds run at different speeds."""
        mine = {r["round"]: r for r in self.ok_runs(key, alloc)}
        refs = {r["round"]: r for r in self.ok_runs(key, ref or self.ref)}
        rs = []
        for rnd, r in mine.items():
            a = kv(r["result"]).get(field)
            b = kv(refs[rnd]["result"]).get(field) if rnd in refs else None
            if a not in (None, "", "n/a") and b not in (None, "", "n/a") and float(b) > 0:
                rs.append(float(a) / float(b))
        return median_or_none(rs)

    def unit(self, key):
        """How a row's figure reads: "run" (a real program: seconds a run), else per second."""
        ok = [kv(r["result"]).get("unit") for rs in self.groups[key].values() for r in rs if r["status"] == "ok"]
        return ok[0] if ok and ok[0] else "op"

    def fig(self, key, ops_per_sec, short=True):
        """A throughput figure as the row reads it: seconds for a real program's run, else x/s."""
        if self.unit(key) == "run":
            return f"{1 / ops_per_sec:.2f} s" if ops_per_sec else "n/a"
        return f"{human(ops_per_sec)}/s" if short else f"{ops_per_sec:,.0f}"

    def name(self, key):
        """The row's name in one-line lists: the workload, and the case where it has several."""
        many = sum(k[0] == key[0] for k in self.cases) > 1
        return f"{key[0]} ({key[1]})" if many else key[0]


def peak_rss(row):
    """A run's peak resident KiB: /usr/bin/time's, but for a real program
    (its result has a unit) the measured process's own, which leaves out the
    script around it (and for redis is the server's)."""
    res = kv(row["result"])
    if "unit" in res:
        return float(res["peak_rss_kib"]) if res.get("peak_rss_kib", "").isdigit() else None
    return float(row["peak_rss_kib"]) if row["peak_rss_kib"] else None


# ---- latest.md sections ---------------------------------------------------------
def header(R, A, charts):
    L = [f"# hakmem benchmarks ({A.mode} mode, {A.rounds} round(s))", "",
         f"- Machine: {A.machine}", f"- Versions: {A.versions}",
         f"- Allocators (LD_PRELOAD, interleaved per run): {', '.join(R.allocs) or 'none (phases only)'}"]
    if R.phases:
        L.append(f"- Phases workload configurations (LD_PRELOAD and environment, interleaved): {', '.join(R.pconfigs)}")
    shared = [float(r["others_pct"]) for rs in R.groups.values() for runs in rs.values() for r in runs
              if (r.get("others_pct") or "").strip()]
    if shared:
        busy = [x for x in shared if x > BUSY_PCT]
        L.append(f"- Other programs took more than {BUSY_PCT} % of the processors during {len(busy)} of {len(shared)} "
                 f"timed runs (at most {max(shared):.0f} %; `others_pct` in latest.csv).")
    L += [f"- Skipped: {A.skipped.replace(';', '; ') or 'none'}",
          (f"- Ratios are against **{R.ref}**; run" if R.speed or R.memory else "- Run") +
          f" time {A.seconds} s. Raw rows: latest.csv. Charts: {', '.join(charts) or 'none'}."]
    return L


def summary(R):
    L = section("Summary: median, and ratio to " + R.ref,
                "Throughput rows: median operations per second (higher is better; real programs: seconds a run), "
                "and the median over rounds of allocator / " + R.ref + " throughput in the same round (above "
                "1.00: faster than " + R.ref + ").  Memory rows: resident overhead over the bytes requested "
                "(lower is better).") + table(["workload", "case"] + R.allocs, 2)
    for key in R.speed + R.memory:
        field = "ops_per_sec" if key in R.speed else "overhead_pct"
        rs = R.stat(key, R.ref, field)
        cells = []
        for a in R.allocs:
            s = R.stat(key, a, field)
            if s is None:
                cells.append("")
            elif s["fails"] or s["med"] is None:
                cells.append(failcell(s))
            elif key in R.speed:
                q = R.round_ratio(key, a, field) if rs and not rs["fails"] else None
                cells.append(R.fig(key, s["med"]) + (f" ({q:.2f}x)" if q is not None else ""))
            else:
                cells.append(f"{s['med']:.1f} %")
        L.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    return L


def geo(rs):
    return math.exp(sum(math.log(r) for r in rs) / len(rs))


def price(R, alloc, title):
    """A hakmem configuration over plain hakmem, across the throughput rows."""
    if alloc not in R.allocs or R.ref != "hakmem":
        return []
    med, best = [], []
    for key in R.speed:
        other, base = R.stat(key, alloc, "ops_per_sec"), R.stat(key, "hakmem", "ops_per_sec")
        q = R.round_ratio(key, alloc, "ops_per_sec")
        if other and base and q and base["best"] and not other["fails"] and not base["fails"]:
            med.append(q)
            best.append(other["best"] / base["best"])
    if not med:
        return []

    def word(g):
        return f"{abs(1 - g) * 100:.1f} % {'slower' if g < 1 else 'faster'}"

    return ["", f"{title} over hakmem, {len(med)} throughput rows, geometric mean of per-round ratios "
                f"**{geo(med):.3f}** ({word(geo(med))}), of best runs **{geo(best):.3f}**."]


def baseline_change(R):
    """hakmem over an earlier build (run.sh --baseline): the geometric mean and
    every throughput row where hakmem is more than 2 % slower."""
    if "hakmem-base" not in R.allocs or R.ref != "hakmem":
        return []
    rows, worse = [], []
    for key in R.speed:
        q = R.round_ratio(key, "hakmem", "ops_per_sec", ref="hakmem-base")
        if q:
            rows.append(q)
            if q < 0.98:
                worse.append(f"{key[0]} {key[1]} {q:.3f}")
    if not rows:
        return []
    return ["", f"hakmem over the baseline build (hakmem-base), per-round ratios of {len(rows)} throughput rows: "
                f"geometric mean **{geo(rows):.3f}**, lowest {min(rows):.3f}; rows more than 2 % slower: "
                f"{'; '.join(worse) if worse else 'none'}."]


def secure_price(R):
    """The hardened build over hakmem."""
    return price(R, "hakmem-secure", "Secure build (libhakmem-secure.so)")


def profile_price(R):
    """The heap profiler at its default rate over hakmem."""
    return price(R, "hakmem-profile", "Heap profiler (libhakmem-profile.so, default rate)")


def throughput_detail(R):
    L = section("Throughput detail",
                "ops/s: larson, mid_large_mt, random_sizes = free+malloc replacements; random_mixed = mallocs (each "
                "freed); cross_thread, prodcons, handoff = blocks passed and freed; shared_slots = blocks allocated, swapped and freed; exchange = blocks replaced or traded; size_walk = mallocs and frees; realloc = realloc calls; large = allocate+touch+free; "
                "sparse_burst = blocks allocated, touched and freed; calloc_reuse = blocks calloc'd, written and freed; "
                "false_sharing = blocks allocated, written and freed; "
                "bignum = operations; cxx_objects = records replaced; thread_churn = blocks allocated; slow_leak = operations; batch = blocks allocated and freed; swap_rounds = blocks made; real = runs (seconds a run "
                "shown) or, for redis, requests. Peak RSS is the median of `/usr/bin/time -f %M` (real programs: the "
                "measured program's own); / " + R.ref + ": the median over rounds of the same round's ratio.") + table(
        ["workload", "case", "allocator", "median ops/s", "best ops/s", f"/ {R.ref}", "peak RSS MiB", "runs"], 3)
    for key in R.speed:
        rs = R.stat(key, R.ref, "ops_per_sec")
        for a in R.allocs:
            s = R.stat(key, a, "ops_per_sec")
            if s is None:
                continue
            if s["fails"] or s["med"] is None:
                L.append(f"| {key[0]} | {key[1]} | {a} | {failcell(s)} | | | | {s['runs']} |")
                continue
            q = R.round_ratio(key, a, "ops_per_sec") if rs and not rs["fails"] else None
            q = f"{q:.2f}" if q is not None else ""
            L.append(f"| {key[0]} | {key[1]} | {a} | {R.fig(key, s['med'], False)} | {R.fig(key, s['best'], False)} | "
                     f"{q} | {mib(s['rss'])} | {s['runs']} |")
    return L


def memory_detail(R):
    L = section("Memory detail",
                "Resident memory above the baseline read before the first allocation (/proc/self/statm), medians. "
                "live: while all blocks live; freed: right after freeing them; settled: after settle_ms; "
                "trimmed: after malloc_trim(0) (n/a when the allocator has no malloc_trim of its own).") + table(
        ["case", "allocator", "overhead %", "best %", "live MiB", "freed MiB", "settled MiB", "trimmed MiB",
         "peak RSS MiB", "runs"], 2)
    for key in R.memory:
        for a in R.allocs:
            s = R.stat(key, a, "overhead_pct", best=min)
            if s is None:
                continue
            if s["fails"] or s["med"] is None:
                L.append(f"| {key[1]} | {a} | {failcell(s)} | | | | | | | {s['runs']} |")
                continue
            f = {n: R.stat(key, a, n) for n in ("live_kib", "freed_kib", "settled_kib", "trimmed_kib")}
            cell = {n: (mib(v["med"]) if v and v["med"] is not None else "n/a") for n, v in f.items()}
            L.append(f"| {key[1]} | {a} | {s['med']:.1f} | {s['best']:.1f} | {cell['live_kib']} | {cell['freed_kib']} | "
                     f"{cell['settled_kib']} | {cell['trimmed_kib']} | {mib(s['rss'])} | {s['runs']} |")
    return L


def heap_scaling(R):
    """random_sizes at several heap sizes (run.sh labels those cases "heap ..."):
    time per operation and peak RSS per size, and each allocator's largest
    over smallest time per op (the median of that ratio within a round)."""
    keys = [k for k in R.speed if k[0] == "random_sizes" and k[1].startswith("heap ")]
    if len(keys) < 2:
        return []
    small, large = keys[0], keys[-1]
    size = lambda k: k[1].split(",")[0][len("heap "):]
    L = section("Heap-size scaling (random_sizes)",
                "The same workload (16 B-256 KiB blocks, one thread, first and last byte written) with more slots: "
                "time per free+malloc (median ns) and peak RSS (MiB) at each live size; last column: time per op "
                f"at {size(large)} over {size(small)}, the median over rounds of that ratio within a round "
                f"(hakmem's target: at most {SCALING_TARGET:.2f}x).") + table(
        ["allocator"] + [f"{size(k)} {what}" for k in keys for what in ("ns/op", "RSS")] + [f"{size(large)} / {size(small)}"])
    verdict = None
    for a in (a for a in R.allocs if any(R.groups[k].get(a) for k in keys)):
        cells = []
        for k in keys:
            s = R.stat(k, a, "ns_per_op", best=min)
            if s is None:
                cells += ["", ""]
            elif s["fails"] or s["med"] is None:
                cells += [failcell(s), ""]
            else:
                cells += [f"{s['med']:,.0f}", mib(s["rss"])]
        # time per op grows as throughput falls: small's ops/s over large's, per round
        mine = {r["round"]: r for r in R.ok_runs(large, a)}
        rs = [float(kv(r["result"])["ns_per_op"]) / float(kv(mine[r["round"]]["result"])["ns_per_op"])
              for r in R.ok_runs(small, a) if r["round"] in mine]
        q = median_or_none([1 / x for x in rs if x > 0])
        cells.append("" if q is None else f"{q:.2f}x")
        L.append(f"| {a} | " + " | ".join(cells) + " |")
        if a == "hakmem":
            verdict = q
    if verdict is not None:
        L += ["", f"hakmem: {size(large)} over {size(small)} time per op **{verdict:.2f}x** "
                  f"({'met' if verdict <= SCALING_TARGET else 'not met'}: target at most {SCALING_TARGET:.2f}x)."]
    return L


def real_programs(R):
    keys = [k for k in R.speed if k[0] == "real"]
    if not keys:
        return []
    L = section("Real programs",
                "Each program's run under each allocator (LD_PRELOAD on the measured program only; redis: on the "
                "server, with redis-benchmark unpreloaded): median wall seconds a run (redis: requests per second), "
                "and the program's peak RSS (redis: the server's VmHWM), MiB. Redis links jemalloc: its glibc "
                "column is that jemalloc, not glibc's malloc.") + table(["program"] + R.allocs)
    for key in keys:
        cells = []
        for a in R.allocs:
            s = R.stat(key, a, "ops_per_sec")
            if s is None:
                cells.append("")
            elif s["fails"] or s["med"] is None:
                cells.append(failcell(s))
            else:
                cells.append(f"{R.fig(key, s['med'])}, {mib(s['rss'])} MiB")
        L.append(f"| {key[1]} | " + " | ".join(cells) + " |")
    return L


def syscalls(path):
    """The syscall pass: a table of mmap / munmap / madvise counts per case and allocator."""
    if not path or not os.path.exists(path):
        return []
    rows = list(csv.DictReader(open(path)))
    if not rows:
        return []
    allocs, cases, cell = [], [], {}
    for r in rows:
        if r["allocator"] not in allocs:
            allocs.append(r["allocator"])
        key = (r["workload"], r["case"])
        if key not in cases:
            cases.append(key)
        if r["status"] != "ok":
            cell[key, r["allocator"]] = "**FAIL**"
            continue
        n = {k: int(v) for k, v in kv(r["result"]).items() if v.isdigit()}
        main = "/".join(f"{n.get(c, 0):,}" for c in ("mmap", "munmap", "madvise"))
        other = sum(v for c, v in n.items() if c not in ("mmap", "munmap", "madvise"))
        cell[key, r["allocator"]] = main + (f" (+{other:,})" if other else "")
    L = section("System calls per run",
                "Each case once per allocator under `strace -f -c -e trace=memory` (untimed): mmap / munmap / "
                "madvise calls, and in brackets the other memory calls (mremap, mprotect, brk, mincore) where there were "
                "any. All threads and child processes count; real programs count the measured program only "
                "(redis: the server). larson and phases run for a set time, so a faster allocator makes more "
                "calls there.") + table(["workload", "case"] + allocs, 2)
    for key in cases:
        L.append(f"| {key[0]} | {key[1]} | " + " | ".join(cell.get((key, a), "") for a in allocs) + " |")
    return L


def fast_path(R):
    L = section("Fast path: instructions per malloc+free pair",
                "`valgrind --tool=callgrind`, batches of 64 mallocs then 64 frees of one size; "
                "(count(iters2) - count(iters1)) / (64 * (iters2 - iters1)), so start-up cancels. "
                "A row counts everything, the benchmark loop's own instructions too; its `in allocator` row "
                "leaves out main's own (the loop, and the PLT jumps callgrind counts in the caller), the same "
                "code for every allocator.") + table(["size"] + R.allocs)
    for key in R.fast:
        for field, label in (("instr_per_pair", key[1]), ("alloc_per_pair", f"{key[1]} in allocator")):
            cells = []
            for a in R.allocs:
                s = R.stat(key, a, field)
                cells.append("" if s is None else failcell(s) if s["fails"] or s["med"] is None else f"{s['med']:.1f}")
            L.append(f"| {label} | " + " | ".join(cells) + " |")
    L.append(CHART)
    return L


def versus_best_peer(R):
    """Every throughput and memory row: hakmem's time against the fastest
    peer's and its peak RSS against the leanest peer's.  Returns the table's
    lines and the misses, one line each."""
    if "hakmem" not in R.allocs or not R.peers:
        return [], []
    L = section("hakmem against the best peer",
                f"Per row: time = the median over rounds of hakmem's time over the peer's in the same round, "
                f"against the peer fastest by that measure; peak RSS against the peer with the least (medians). "
                f"A row passes when the time is at most {PASS_TIME:.2f}x and the RSS at most {PASS_RSS:.2f}x, or "
                f"under {SMALL_RSS_KIB // 1024} MiB. Peers: {', '.join(R.peers)}; failed peers do not count. "
                f"Memory rows have no time figure. shared: the row's runs (hakmem's and the peers') during which "
                f"other programs took more than {BUSY_PCT} % of the processors; a row with many is less sure.") + table(
        ["workload", "case", "time / best peer", "hakmem RSS MiB", "least peer RSS MiB", "RSS ratio", "shared",
         "verdict"], 2)
    misses = []
    for key in R.speed + R.memory:
        field = "ops_per_sec" if key in R.speed else "overhead_pct"
        h = R.stat(key, "hakmem", field)
        if h is None:
            continue
        runs = [r for a in ["hakmem"] + R.peers for r in R.groups[key].get(a, [])]
        shared = sum(1 for r in runs if (r.get("others_pct") or "").strip() and float(r["others_pct"]) > BUSY_PCT)
        scell = f"{shared}/{len(runs)}"
        if h["fails"] or h["med"] is None:
            L.append(f"| {key[0]} | {key[1]} | {failcell(h)} | | | | {scell} | **miss** |")
            misses.append(f"{R.name(key)}: hakmem FAIL")
            continue
        why, tcell = [], "n/a"
        if key in R.speed:  # peer's throughput over hakmem's = hakmem's time over the peer's
            t = {p: q for p in R.peers if (q := R.round_ratio(key, p, field, ref="hakmem")) is not None}
            if t:
                bp = max(t, key=t.get)
                tcell = f"{t[bp]:.2f}x {bp}"
                if t[bp] > PASS_TIME:
                    why.append(f"time {t[bp]:.2f}x {bp}")
        peer_rss = {p: s["rss"] for p in R.peers if (s := R.stat(key, p, field)) and not s["fails"] and s["rss"]}
        rcell = lcell = ""
        if peer_rss and h["rss"]:
            lp = min(peer_rss, key=peer_rss.get)
            ratio = h["rss"] / peer_rss[lp]
            lcell, rcell = f"{mib(peer_rss[lp])} {lp}", f"{ratio:.2f}x"
            if ratio > PASS_RSS and h["rss"] >= SMALL_RSS_KIB:
                why.append(f"peak RSS {ratio:.2f}x {lp} ({mib(h['rss'])} vs {mib(peer_rss[lp])} MiB)")
        L.append(f"| {key[0]} | {key[1]} | {tcell} | {mib(h['rss'])} | {lcell} | {rcell} | {scell} | "
                 + ("**miss**" if why else "pass") + " |")
        if why:
            misses.append(f"{R.name(key)}: " + "; ".join(why))
    return L, misses


def misses_section(R, misses):
    if "hakmem" not in R.allocs or not R.peers:
        return []
    L = section("Misses", f"Rows where hakmem is more than {PASS_TIME:.2f}x the fastest peer's time or "
                          f"{PASS_RSS:.2f}x the leanest peer's peak RSS (see \"hakmem against the best peer\"): "
                          f"{len(misses) or 'none'}.") + [""]
    return L + [f"- {m}" for m in misses]


# ---- phases: hakmem's learned strategy versus each pinned strategy and peers --
class Phases:
    """The phases workload's runs per configuration, priced per phase."""

    def __init__(self, R):
        self.R = R
        self.pins = [c for c in R.pconfigs if c.startswith("hakmem-pin")]
        self.peers = [c for c in R.pconfigs if not c.startswith("hakmem")]

    def runs(self, c):
        """Configuration c's phases runs: (result dicts of the ok ones, failed, all)."""
        rs = [r for key in self.R.phases for r in self.R.groups[key].get(c, [])]
        ok = [kv(r["result"]) for r in rs if r["status"] == "ok"]
        return ok, len(rs) - len(ok), len(rs)

    def med(self, c, f):
        """Median over c's runs of f(result); None when c did not run, a run failed or a field is missing."""
        ok, fails, _ = self.runs(c)
        try:
            return statistics.median([f(r) for r in ok]) if ok and not fails else None
        except (KeyError, ValueError, ZeroDivisionError):
            return None

    def cell(self, c, f, fmt=None, bold=False):
        ok, fails, n = self.runs(c)
        if not n:
            return ""
        if fails:
            return f"**FAIL** {fails}/{n}"
        v = self.med(c, f)
        if v is None:
            return "n/a"
        t = fmt(v) if fmt else (f"{v:.1f}" if abs(v) < 100 else f"{v:.0f}")
        return f"**{t}**" if bold else t

    def best_pinned(self, p):
        """The pinned configuration with the lowest median cost of phase p (or "total"), and that cost; (None, None) if none ran."""
        pv = {c: self.med(c, cost_of(p)) for c in self.pins}
        pv = {c: v for c, v in pv.items() if v is not None}
        best = min(pv, key=pv.get) if pv else None
        return best, pv.get(best)

    def length(self):
        R = self.R
        k0 = kv(next((r["result"] for key in R.phases for rs in R.groups[key].values() for r in rs if r["status"] == "ok"), ""))
        return k0.get("phase_s", "?"), max(self.runs(c)[2] for c in R.pconfigs)


def pcost(res, p, w=0.5):
    """cost_ms = W * sys_ms + (1 - W) * MiB*s above live, of one run's phase p (or "total")."""
    if p == "total":
        return sum(pcost(res, q, w) for q in PH)
    return w * float(res[f"p_{p}_sys_ms"]) + (1 - w) * float(res[f"p_{p}_xs"])


def excess(p):  # average resident MiB above live in phase p
    return lambda r: float(r[f"p_{p}_rss"]) - float(r[f"p_{p}_live"])


def us_per_block(p):  # wall time per block allocated in phase p
    return lambda r: float(r[f"p_{p}_wall_ms"]) * 1e3 / float(r[f"p_{p}_ops"])


def cost_of(p, w=0.5):
    return lambda r: pcost(r, p, w)


def phases_section(P):
    R = P.R
    plen, rounds = P.length()
    L = section("Phases: learned strategy versus pinned strategies and peers",
                f"`phases` ({plen} s per phase, {rounds} round(s)): churn 16-1024 B, bursts of 256 KiB-32 MiB "
                "blocks, idle holding 1 MiB, churn 1-32 KiB, 64 KiB-4 MiB slots replaced, idle. Cell: median cost "
                "of the phase in ms at weight W = 50, `0.5 x system ms + 0.5 x MiB*s resident above live` (lower "
                "is better). `hakmem` learns at W = 50, `hakmem-w0`/`-w100` learn at W = 0/100 "
                "(`HAKMEM_LEARN_WEIGHT`), `hakmem-pinK` runs strategy K only (`HAKMEM_LEARN=0 HAKMEM_LEARN_PIN=K`: "
                + ", ".join(f"{k} {v}" for k, v in STRATEGY.items()) + "). **Bold**: the best pinned strategy of "
                "the row; last column: learning over it (below 1.00: learning beat every fixed strategy).") + table(
        ["phase"] + R.pconfigs + ["learn / best pinned"])
    oracle = 0.0
    for p in PH + ["total"]:
        best, bv = P.best_pinned(p)
        if p != "total":
            oracle = oracle + bv if best and oracle is not None else None
        learn = P.med("hakmem", cost_of(p))
        ratio = f"{learn / bv:.2f} ({best[len('hakmem-'):]})" if best and learn is not None and bv > 0 else "n/a"
        L.append(f"| {p} | " + " | ".join(P.cell(c, cost_of(p), bold=c == best) for c in R.pconfigs) + f" | {ratio} |")
    learn = P.med("hakmem", cost_of("total"))
    if oracle and learn is not None:
        L += ["", f"Best pinned strategy chosen afresh in each phase (an oracle's schedule), summed: {oracle:.1f} ms; "
                  f"learning: {learn:.1f} ms ({learn / oracle:.2f}x)."]
    L += told_line(P) + claims(P) + ["", "![phases chart](phases.png)"] + phases_detail(P)
    return L


def told_line(P):
    """hakmem-told: learning, and the program calls malloc_trim(0) entering each idle phase."""
    told = {p: P.med("hakmem-told", cost_of(p)) for p in ("idle", "idle2")}
    if None in told.values() or not P.pins:
        return []
    parts = []
    for p, v in told.items():
        b, bv = P.best_pinned(p)
        if b and bv > 0:
            parts.append(f"{p} {v:.1f} against {bv:.1f} ({b[len('hakmem-'):]}, {v / bv:.2f}x)")
    return ["", "Told when each idle phase starts (`hakmem-told`: learning at W = 50, and the program calls "
                "`malloc_trim(0)` entering each idle phase), the learner's idle cost against the best pinned "
                "strategy's: " + "; ".join(parts) + ". The best pinned strategy of an idle phase kept nothing in "
                "the burst before it; one that served the burst fast purges the burst's cache in the idle phase, "
                "told or not."]


def claims(P):
    """(a) weight 0: memory held in the idle phases, against each peer;
    (b) weight 100: time of the burst phases, against the best peer."""
    R = P.R
    L = ["", "Claims, computed from the medians:", ""]

    def inputs(cfg, fig, phases, label):
        """cfg's medians of fig in phases, or None after an n/a line."""
        vals = {p: P.med(cfg, fig(p)) for p in phases}
        if cfg in R.pconfigs and None not in vals.values() and P.peers:
            return vals
        why = f"{cfg} did not run" if cfg not in R.pconfigs else "no peer ran" if not P.peers else f"{cfg} failed or lacks fields"
        L.append(f"- {label}: n/a ({why}).")
        return None

    idle = ("idle", "idle2")
    w0 = inputs("hakmem-w0", excess, idle, "(a) weight 0 (`hakmem-w0`), idle phases, average resident MiB above live")
    if w0 is not None:
        worse, vals = [], []
        for c in P.peers:
            pv = {p: P.med(c, excess(p)) for p in idle}
            vals.append(f"{c} " + " / ".join(("FAIL" if P.runs(c)[1] else "n/a") if pv[p] is None else f"{pv[p]:.1f}" for p in idle))
            worse += [f"{c} {p}" for p in idle if pv[p] is None or not w0[p] < pv[p]]
        L.append("- (a) weight 0 (`hakmem-w0`), idle / idle2, average resident MiB above live (lower is better): "
                 f"hakmem-w0 {w0['idle']:.1f} / {w0['idle2']:.1f}; " + "; ".join(vals) + ": "
                 + ("**met** (below every peer in both idle phases)." if not worse else
                    f"**not met** (not below: {', '.join(worse)})."))
    burst = ("burst", "burst2")
    w100 = inputs("hakmem-w100", us_per_block, burst, "(b) weight 100 (`hakmem-w100`), burst phases, wall time per block")
    if w100 is not None:
        parts, miss = [], []
        for p in burst:
            pv = {c: P.med(c, us_per_block(p)) for c in P.peers}
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
    return L


def phases_detail(P):
    R = P.R
    burst = ("burst", "burst2")
    L = section("Phases detail",
                "Whole run per configuration at three weights (medians): W = 0 prices only MiB*s above live, "
                "W = 100 only system ms; and wall µs per block in the burst phases.") + table(
        ["configuration", "W = 0 (MiB*s)", "W = 50", "W = 100 (sys ms)", "burst µs/block", "burst2 µs/block", "runs"])
    for c in R.pconfigs:
        L.append(f"| {c} | " + " | ".join([P.cell(c, cost_of("total", w)) for w in (0, 0.5, 1)] +
                                          [P.cell(c, us_per_block(p)) for p in burst]) + f" | {P.runs(c)[2]} |")
    L += ["", "Per phase (medians): ops = blocks allocated; sys ms and minor faults from getrusage; MiB*s = resident "
              "above live integrated over the phase; RSS and live = averages."] + table(
        ["phase", "configuration", "ops", "wall ms", "sys ms", "minor faults", "MiB*s above live", "avg RSS MiB",
         "avg live MiB", "cost W = 50"], 2)
    for p in PH:
        for c in R.pconfigs:
            def f(n, p=p):
                return lambda r: float(r[f"p_{p}_{n}"])
            L.append(f"| {p} | {c} | " + " | ".join(
                [P.cell(c, f("ops"), lambda v: f"{v:,.0f}"), P.cell(c, f("wall_ms"), lambda v: f"{v:.0f}"),
                 P.cell(c, f("sys_ms")), P.cell(c, f("flt"), lambda v: f"{v:,.0f}"), P.cell(c, f("xs")),
                 P.cell(c, f("rss")), P.cell(c, f("live")), P.cell(c, cost_of(p))]) + " |")
    return L


# ---- charts: gnuplot script for latest.png and phases.png -----------------------
def rel_glibc(R):
    def scale(key, s):
        g = R.stat(key, "glibc", "ops_per_sec")
        if not s or s["fails"] or s["med"] is None or not g or not g["med"] or g["fails"]:
            return None
        return s["med"] / g["med"]
    return scale


def plain(key, s):
    return None if not s or s["fails"] or s["med"] is None else s["med"]


def speed_label(R):
    def label(k):  # the workload, and its case's first part where it has several cases (mid_large_mt: also the cycles)
        parts = k[1].split(", ")
        many = sum(c[0] == k[0] for c in R.speed) > 1
        return k[0].replace("_", "-") + (" " + parts[0] if many else "") + (" " + parts[-1] if k[0] == "mid_large_mt" else "")
    return label


def write_dat(R, A, name, keys, field, label, scale, missing):
    path = os.path.join(A.tmp, name)
    fails = []
    with open(path, "w") as f:
        f.write('"group" ' + " ".join(f'"{a}"' for a in R.allocs) + "\n")
        for gi, key in enumerate(keys):
            vals = []
            for ai, a in enumerate(R.allocs):
                s = R.stat(key, a, field)
                v = scale(key, s)
                if s and (s["fails"] or s["med"] is None):
                    fails.append((gi, ai))
                vals.append(missing if v is None else f"{v:.4g}")  # gnuplot rejects an all-NaN column
            f.write(f'"{label(key)}" ' + " ".join(vals) + "\n")
    return path, fails


def chart_main(R, A):
    """latest.png: throughput relative to glibc, resident overhead, instructions per pair; one
    panel each, as wide as its number of bar groups asks, one colour per allocator."""
    rel = rel_glibc(R)
    panels = [("latest-speed.dat", R.speed, "ops_per_sec", speed_label(R), rel,
               "Throughput relative to glibc\\n(higher is better)", "x glibc", ""),
              ("latest-mem.dat", R.memory, "overhead_pct", lambda k: k[1], plain,
               "Resident overhead over requested bytes\\n(lower is better)", "overhead %", "%.1f"),
              ("latest-fast.dat", R.fast, "instr_per_pair", lambda k: k[1], plain,
               "Instructions per malloc+free pair\\n(lower is better)", "instructions", "%.0f")]
    panels = [p for p in panels if p[1]]
    if not panels:
        return []
    n = len(R.allocs)
    weight = [max(10, len(p[1])) for p in panels]  # room for a narrow panel's title and key
    width = max(620 * len(panels), 48 * sum(weight))
    gp = [f'set terminal pngcairo size {width},600 font "Sans,10"',
          f'set output "{os.path.join(A.out, "latest.png")}"',
          f'set multiplot title "hakmem benchmarks ({A.mode}, {A.rounds} round(s)): {A.machine.replace(chr(34), "")}"',
          "set style data histograms", "set style histogram clustered gap 1", "set style fill solid 0.9 border -1",
          "set boxwidth 0.9", "set grid ytics", "set key below horizontal", "set xtics rotate by -25 noenhanced",
          "set yrange [0:*]", "set offsets 0,0,graph 0.08,0"]
    x0 = 0.0
    for (name, keys, field, label, scale, title, ylabel, fmt), wt in zip(panels, weight):
        w = wt / sum(weight)
        gp += [f"set origin {x0:.4f},0", f"set size {w:.4f},0.95"]
        x0 += w
        path, fails = write_dat(R, A, name, keys, field, label, scale, "1" if field == "instr_per_pair" else "0")
        gp += [f'set title "{title}"', f'set ylabel "{ylabel}"', "unset label"]
        if scale is rel:  # clip outliers at 4x so the others stay readable; print their value
            top = 4.0
            vals = [[rel(k, R.stat(k, a, field)) for a in R.allocs] for k in keys]
            if any(v and v > top for row in vals for v in row):
                gp.append(f"set yrange [0:{top}]")
                for gi, row in enumerate(vals):
                    for ai, v in enumerate(row):
                        if v and v > top:
                            x = gi + (ai - (n - 1) / 2) / (n + 1)
                            gp.append(f'set label "{v:.1f}x" at {x:.3f}, graph 0.97 right rotate by 90 front font ",8"')
        for gi, ai in fails:  # a failed run is marked where its bar would be
            x = gi + (ai - (n - 1) / 2) / (n + 1)
            gp.append(f'set label "FAIL" at {x:.3f}, graph 0.03 center rotate by 90 tc rgb "red" font ",9"')
        if scale is rel:
            extra = ", 1 with lines dt 2 lc rgb 'black' notitle"
        else:  # absolute figures: print each value above its bar (skip 1: the header row)
            cond = "> 1" if field == "instr_per_pair" else "!= 0"
            extra = (f', for [i=2:{n + 1}] "{path}" skip 1 using ($0+(i-2-{(n - 1) / 2})/{n + 1}.0):i:(column(i) {cond} ? sprintf("{fmt}",column(i)) : "") '
                     'with labels offset 0,0.6 font ",8" notitle')
        if field == "instr_per_pair":  # spans 50..2000: log scale, DESIGN's target of 40 as a line
            gp += ["set logscale y", "set yrange [10:*]"]
            extra += ", 40 with lines dt 2 lc rgb 'red' title 'target 40'"
        gp.append(f'plot for [i=2:{n + 1}] "{path}" using i:xtic(1) title columnheader(i) '
                  f'lc rgb word("{" ".join(COLORS.get(a, "#9467bd") for a in R.allocs)}", i-1){extra}')
        gp += ["unset logscale y", "set yrange [0:*]"]
    gp.append("unset multiplot")
    return gp


def chart_phases(P, A):
    """phases.png: cost per phase at W = 50, grouped by phase: hakmem learning, each pinned strategy, each peer."""
    R = P.R
    if not R.phases:
        return []
    plen, rounds = P.length()
    series = [c for c in R.pconfigs if c == "hakmem" or c in P.pins or c in P.peers]
    m = len(series)
    path = os.path.join(A.tmp, "phases.dat")
    marks = []
    table = [[P.med(c, cost_of(p)) for c in series] for p in PH + ["total"]]
    low = min([v for row in table for v in row if v is not None and v > 0] or [1])
    floor = 10 ** math.floor(math.log10(low * 0.8))  # log scale: the axis starts at a power of 10 below the least cost
    with open(path, "w") as f:
        f.write('"phase" ' + " ".join(f'"{c}"' for c in series) + "\n")
        for gi, p in enumerate(PH + ["total"]):
            for ci, c in enumerate(series):
                if table[gi][ci] is None:
                    x = gi + (ci - (m - 1) / 2) / (m + 1)
                    marks.append(f'set label "{"FAIL" if P.runs(c)[1] else "n/a"}" at {x:.3f}, graph 0.03 center rotate by 90 '
                                 'tc rgb "red" font ",9"')
            f.write(f'"{p}" ' + " ".join(f"{max(v or 0, floor):.4g}" for v in table[gi]) + "\n")
    gp = ["reset", 'set terminal pngcairo size 1280,600 font "Sans,10"', f'set output "{os.path.join(A.out, "phases.png")}"',
          f'set title "phases ({plen} s each, {rounds} round(s)): median cost per phase at W = 50, '
          f'0.5 x system ms + 0.5 x MiB*s above live (lower is better)" noenhanced',
          "set style data histograms", "set style histogram clustered gap 1", "set style fill solid 0.9 border -1",
          "set boxwidth 0.9", "set grid ytics", "set key below horizontal maxcols 12 noenhanced samplen 2", "set xtics noenhanced",
          "set logscale y", f"set yrange [{floor:g}:*]", 'set ylabel "cost, ms (log scale)"'] + marks
    gp.append(f'plot for [i=2:{m + 1}] "{path}" using i:xtic(1) title columnheader(i) '
              f'lc rgb word("{" ".join(COLORS.get(c, "#9467bd") for c in series)}", i-1)')
    return gp


# ---- history: one dated line per full run -----------------------------------------
def history_line(R, P, A, misses):
    parts = []
    for key in R.speed + R.memory:
        field, better = ("ops_per_sec", max) if key in R.speed else ("overhead_pct", min)
        st = {a: R.stat(key, a, field) for a in R.allocs}
        good = {a: s["med"] for a, s in st.items() if s and not s["fails"] and s["med"] is not None}
        name = R.name(key) if key in R.speed else f"memory {key[1]}"
        if "hakmem" in R.allocs and "hakmem" not in good:
            parts.append(f"{name}: hakmem FAIL")
            continue
        others = {a: v for a, v in good.items() if a in R.peers}  # hakmem's own builds are no peers
        if key in R.speed:  # the same per-round ratios as the tables
            others = {a: q for a in others if (q := R.round_ratio(key, a, field)) is not None}
        if "hakmem" in good and others:
            bp = better(others, key=others.get)
            r = 1 / others[bp] if key in R.speed else None
            parts.append(f"{name}: hakmem {r:.2f}x best peer ({bp})" if r is not None else
                         f"{name}: hakmem {good['hakmem']:.1f} % vs {bp} {others[bp]:.1f} %")
        elif good:
            bp = better(good, key=good.get)
            parts.append(f"{name}: best {bp}")
    for key in R.fast:
        s = R.stat(key, "hakmem", "instr_per_pair")
        if s and s["med"] is not None:
            a = R.stat(key, "hakmem", "alloc_per_pair")
            parts.append(f"fastpath {key[1]}: {s['med']:.0f} instr" +
                         (f" ({a['med']:.0f} in allocator)" if a and a["med"] is not None else ""))
    if R.phases:  # whole run at W = 50: learning against the best pinned strategy and the best peer
        tot = {c: P.med(c, cost_of("total")) for c in R.pconfigs}
        tot = {c: v for c, v in tot.items() if v is not None}
        bpin = min((c for c in tot if c in P.pins), key=tot.get, default=None)
        bpeer = min((c for c in tot if c in P.peers), key=tot.get, default=None)
        if "hakmem" in tot:
            parts.append(f"phases cost: hakmem {tot['hakmem']:.0f} ms"
                         + (f", {tot['hakmem'] / tot[bpin]:.2f}x best pinned ({bpin[7:]})" if bpin else "")
                         + (f", {tot['hakmem'] / tot[bpeer]:.2f}x best peer ({bpeer})" if bpeer else ""))
        elif "hakmem" in R.pconfigs:
            parts.append("phases: hakmem FAIL")
    if "hakmem" in R.allocs and R.peers:
        parts.append(f"misses: {len(misses)}")
    return f"- {A.machine.split('; ')[-1]} | {A.versions.split(', ')[-1]} | {A.rounds} rounds | " + "; ".join(parts)


def append_history(path, line):
    new = not os.path.exists(path)
    with open(path, "a") as f:
        if new:
            f.write("# Benchmark history (one line per `bench/run.sh --full`)\n\n")
        f.write(line + "\n")


# ---- README: latest.md's main sections between the bench markers -----------------
def compact_summary(sec):
    """The Summary table as hakmem against its best peer, one line a row."""
    lines = sec.splitlines()
    rows = [l for l in lines if l.startswith("|")]
    if len(rows) < 3:
        return sec
    cols = [c.strip() for c in rows[0].strip("|").split("|")]
    peers = [i for i, c in enumerate(cols) if c in PEERS]
    hk = cols.index("hakmem") if "hakmem" in cols else None
    out = ["| workload | case | hakmem | best peer |", "|---|---|---:|---|"]
    for r in rows[2:]:
        cells = [c.strip() for c in r.strip("|").split("|")]
        if hk is None or len(cells) != len(cols):
            continue
        memory = cells[hk].endswith("%")
        best = None
        for i in peers:
            cell = cells[i]
            if memory:
                m = re.match(r"([0-9.]+) %", cell)
                key = float(m.group(1)) if m else None
                better = key is not None and (best is None or key < best[0])
            else:
                m = re.search(r"\(([0-9.]+)x\)", cell)
                key = float(m.group(1)) if m else None
                better = key is not None and (best is None or key > best[0])
            if better:
                best = (key, f"{cols[i]} {cell}")
        mine = cells[hk].replace(" (1.00x)", "")
        out.append(f"| {cells[0]} | {cells[1]} | {mine} | {best[1] if best else 'n/a'} |")
    first = lines.index(rows[0])
    note = ("Medians; in brackets, the median per-round ratio to hakmem (above 1.00: faster than hakmem). "
            "Memory: resident overhead over the bytes requested.")
    # the baseline build's comparison is a developer's check: latest.md keeps it
    rest = [l for l in lines[first + len(rows):] if not l.startswith("hakmem over the baseline build")]
    rest = [l for i, l in enumerate(rest) if l or i == 0 or rest[i - 1]]  # no blank line twice
    return "\n".join([lines[0], "", note, ""] + out + rest)


def refresh_readme(readme, latest):
    md = open(latest).read()
    head, *secs = md.split("\n## ")
    head = head.replace("# hakmem benchmarks", "### Latest run", 1)
    head = re.sub(r"Raw rows: latest\.csv\..*", "Details: bench/results/latest.md.", head)
    head = "\n".join(l for l in head.splitlines()
                      if not l.startswith(("- Allocators", "- Other programs", "- Skipped", "- Ratios are", "- Phases workload")))

    def pick(title):
        return [sec.rstrip() for sec in secs if sec.startswith(title)]

    parts = [head.rstrip()] + ["#### " + compact_summary(sec) for sec in pick("Summary")]
    if "](latest.png)" in md:  # the chart sits in a section the README leaves out
        parts.append("![benchmark chart](latest.png)")
    parts.append("Details: [bench/results/latest.md](bench/results/latest.md).")
    body = "\n\n".join(parts).replace("](latest.png)", "](bench/results/latest.png)")
    body = body.replace("](phases.png)", "](bench/results/phases.png)") + "\n"
    text = open(readme).read()
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    pre, rest = text.split(begin, 1)
    post = rest.split(end, 1)[1]
    open(readme, "w").write(pre + begin + "\n" + body + end + post)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for opt in ("csv", "syscalls", "out", "tmp", "mode", "rounds", "machine", "versions", "skipped", "seconds", "readme", "latest"):
        ap.add_argument("--" + opt, default="")
    A = ap.parse_args()
    if A.readme:
        refresh_readme(A.readme, A.latest)
        return
    R = Runs(list(csv.DictReader(open(A.csv))))
    P = Phases(R)
    charts = (["latest.png"] if R.speed or R.memory or R.fast else []) + (["phases.png"] if R.phases else [])
    table, misses = versus_best_peer(R)
    L = header(R, A, charts)
    if R.speed or R.memory:
        L += summary(R) + baseline_change(R) + secure_price(R) + profile_price(R) + ([] if R.fast else [CHART])
    if R.speed:
        L += throughput_detail(R)
    if R.memory:
        L += memory_detail(R)
    L += heap_scaling(R) + real_programs(R) + syscalls(A.syscalls)
    if R.fast:
        L += fast_path(R)
    if R.phases:
        L += phases_section(P)
    L += table + misses_section(R, misses)
    open(os.path.join(A.out, "latest.md"), "w").write("\n".join(L) + "\n")
    open(os.path.join(A.tmp, "latest.gp"), "w").write("\n".join(chart_main(R, A) + chart_phases(P, A)) + "\n")
    if A.mode == "full":
        append_history(os.path.join(A.out, "history.md"), history_line(R, P, A, misses))


if __name__ == "__main__":
    main()
