#!/usr/bin/env python3
"""Report of bench/phases.sh: the cost of each phase per configuration.

cost_ms = W * sys_ms + (1 - W) * xs    (xs: MiB*s resident above live)
at W = 0.5 for the main table; medians over rounds.  Writes phases.md and a
gnuplot script phases.gp (drawing phases.png).
usage: phases_report.py CSV OUTDIR MODE ROUNDS
"""
import csv
import statistics
import sys

csv_path, out, mode, rounds = sys.argv[1:5]
PHASES = ["churn", "burst", "idle", "churn2", "burst2", "idle2"]
runs = {}
for row in csv.DictReader(open(csv_path)):
    if row["result"] == "FAIL":
        runs.setdefault(row["config"], []).append(None)
        continue
    kv = dict(w.split("=", 1) for w in row["result"].split() if "=" in w)
    runs.setdefault(row["config"], []).append({k: float(v) for k, v in kv.items() if k not in ("bench", "check")})

configs = list(runs)
pins = [c for c in configs if c.startswith("pin")]
peers = [c for c in configs if not c.startswith("hakmem") and not c.startswith("pin")]
NAMES = {"pin0": "pinned default", "pin1": "pinned speed", "pin2": "pinned lean", "pin3": "pinned memory"}


def med(config, field):
    vals = [r[field] for r in runs[config] if r is not None and field in r]
    return statistics.median(vals) if vals else None


def cost(config, phase, w=0.5):
    s, x = med(config, f"{phase}_sys_ms"), med(config, f"{phase}_xs")
    return None if s is None else w * s + (1 - w) * x


def total(config, w=0.5):
    parts = [cost(config, p, w) for p in PHASES]
    return None if None in parts else sum(parts)


def cell(v):
    return "n/a" if v is None else f"{v:.0f}"


L = [f"### Phases: learned strategy versus pinned strategies and peers ({mode} mode, {rounds} round(s))", "",
     "Cost per phase in ms, `0.5 × system ms + 0.5 × MiB·s resident above live` (median; lower is better; "
     "raw fields in bench/results/phases.csv). `hakmem` learns at weight 50; `pinned ...` is hakmem with "
     "`HAKMEM_LEARN=0 HAKMEM_LEARN_PIN=k`.", "",
     "| phase | " + " | ".join(["hakmem"] + [NAMES.get(c, c) for c in pins + peers]) + " | learn / best pinned |",
     "|---|" + "---:|" * (2 + len(pins) + len(peers))]
verdicts = []
for p in PHASES + ["total"]:
    get = (lambda c: total(c)) if p == "total" else (lambda c, p=p: cost(c, p))
    pinned = {c: get(c) for c in pins if get(c) is not None}
    best = min(pinned, key=pinned.get) if pinned else None
    learn = get("hakmem")
    cells = [cell(learn)] + [("**" + cell(get(c)) + "**") if c == best else cell(get(c)) for c in pins] + \
            [cell(get(c)) for c in peers]
    ratio = learn / pinned[best] if best and learn is not None and pinned[best] > 0 else None
    L.append(f"| {p} | " + " | ".join(cells) + f" | {'n/a' if ratio is None else f'{ratio:.2f}'} |")
    if ratio is not None:
        verdicts.append((p, ratio))

L += ["", "Checks against the targets (computed from the medians above):", ""]
within = [p for p, r in verdicts if p != "total" and r <= 1.05]
L.append(f"- every phase within 5 % of the best pinned strategy: {'met' if len(within) == len(PHASES) else 'not met'} "
         f"({len(within)} of {len(PHASES)} phases: {', '.join(within) or 'none'})")
tot = total("hakmem")
beats_pins = tot is not None and all(total(c) is not None and tot < total(c) for c in pins)
beats_peers = tot is not None and all(total(c) is not None and tot < total(c) for c in peers)
L.append(f"- whole run, learning below every pinned strategy: {'met' if beats_pins else 'not met'}; "
         f"below every peer: {'met' if beats_peers else 'not met'}")
if "hakmem-w0" in runs:
    idle = {c: sum(med(c, f"{p}_xs") or 0 for p in ("idle", "idle2")) for c in ["hakmem-w0"] + peers}
    ok = all(idle["hakmem-w0"] < idle[c] for c in peers)
    L.append(f"- weight 0 (memory): MiB·s above live in the idle phases, hakmem {idle['hakmem-w0']:.1f} vs "
             + ", ".join(f"{c} {idle[c]:.1f}" for c in peers) + f": {'met' if ok else 'not met'}")
if "hakmem-w100" in runs:
    speed = {c: sum(med(c, f"{p}_ops") or 0 for p in ("burst", "burst2")) for c in ["hakmem-w100"] + peers}
    best_peer = max(peers, key=lambda c: speed[c]) if peers else None
    ok = best_peer is not None and speed["hakmem-w100"] >= speed[best_peer]
    L.append(f"- weight 100 (speed): burst operations, hakmem {speed['hakmem-w100']:.0f} vs best peer "
             f"{best_peer} {speed.get(best_peer, 0):.0f}: {'met' if ok else 'not met'}")
L += ["", "![phases chart](bench/results/phases.png)", ""]
open(f"{out}/phases.md", "w").write("\n".join(L) + "\n")

# gnuplot: grouped bars of cost per phase (log scale)
order = ["hakmem"] + pins + peers
with open(f"{out}/phases.dat", "w") as f:
    f.write("phase " + " ".join(NAMES.get(c, c).replace(" ", "_") for c in order) + "\n")
    for p in PHASES:
        f.write(p + " " + " ".join(f"{max(cost(c, p) or 0.1, 0.1):.2f}" for c in order) + "\n")
with open(f"{out}/phases.gp", "w") as f:
    f.write(f"""set terminal pngcairo size 1100,500 noenhanced font ",10"
set output "{out}/phases.png"
set title "phases: cost per phase (0.5 x system ms + 0.5 x MiB*s above live; lower is better)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.9 border -1
set logscale y
set ylabel "cost (ms, log scale)"
set key outside right
set grid ytics
plot for [i=2:{len(order) + 1}] "{out}/phases.dat" using i:xtic(1) title columnheader
""")
print("\n".join(L))
