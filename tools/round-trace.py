#!/usr/bin/env python3
"""Summarizes round traces (docs/tracing.md): where an iteration's time goes.

usage: tools/round-trace.py TRACE_DIR_OR_FILES... [--job JOB] [--skip N]

Reads the JSON-lines files psd and workerd write with trace_dir set (one per
node and job) and prints, for each phase of an iteration, its mean, median
and 90th percentile in milliseconds, then the mean iteration time in each
tenth of the job (to show a job slowing down). Times are CLOCK_MONOTONIC,
shared by the processes of one host; phases that compare two hosts' clocks
are only shown when every trace comes from one host (the default cluster).
"""
import glob
import json
import os
import statistics
import sys


def load(paths, job):
    files = []
    for p in paths:
        files += sorted(glob.glob(os.path.join(p, "*.jsonl"))) if os.path.isdir(p) else [p]
    if job:
        files = [f for f in files if os.path.basename(f).startswith(job + "-")]
    iters, rounds = {}, {}
    for f in files:
        for line in open(f):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("ev") == "iteration":
                iters.setdefault(r["node"], {})[r["t"]] = r
            elif r.get("ev") == "round":
                rounds.setdefault(r["node"], {})[r["t"]] = r
    return files, iters, rounds


def ms(a, b):
    return (b - a) / 1e3 if a and b and b >= a else None


def row(name, xs, note="", scale=1.0):
    xs = [x * scale for x in xs if x is not None]
    if not xs:
        return
    xs.sort()
    p90 = xs[min(len(xs) - 1, int(0.9 * len(xs)))]
    print(f"  {name:<44} {statistics.mean(xs):8.3f} {statistics.median(xs):8.3f} {p90:8.3f}  {note}")


def rtt_rows(flows):
    """Each flow's mean round trip against its peer's RTprop: what queued
    on either direction of the path (traces from before the rtt keys have
    none)."""
    fl = [f for f in flows if f.get("rtt_mean_us")]
    row(" round trip, flow mean", [f["rtt_mean_us"] for f in fl], "(ms)", 1e-3)
    row(" round trip, flow mean over RTprop",
        [f["rtt_mean_us"] - f["rtprop_us"] for f in fl if f["rtprop_us"]], "(ms)", 1e-3)


def critical_path(iters, rounds, skip):
    """Each round's chain of events: the psd that closed last, the worker
    whose push it waited for, the psd whose broadcast that worker waited for."""
    ws, ss = sorted(iters), sorted(rounds)
    if not ws or not ss:
        return
    names = [("psd opens round -> last broadcast datagram", []),
             ("-> worker closes the pull flow", []),
             ("-> trainer wakes (hand-off)", []),
             ("compute", []),
             ("-> last push datagram sent", []),
             ("-> psd closes the push flow", []),
             ("-> round thread wakes (hand-off)", []),
             ("aggregate + optimizer", []),
             ("-> next round opens", [])]
    n = min(min(len(rounds[s]) for s in ss), min(len(iters[w]) for w in ws))
    for t in range(skip, n - 1):
        try:
            s = max(ss, key=lambda x: rounds[x][t]["closed"])
            r = rounds[s][t]
            wi = max(range(len(ws)), key=lambda i: r["pushes"][i][2])
            w = iters[ws[wi]][t]
            pi = max(range(len(ss)), key=lambda i: w["pull"][i][2])
            # That worker's broadcast flows from that psd (one, or one per
            # segment): the last one sent.
            b = max((f["timing"] for f in rounds[ss[pi]][t]["bcasts"] if f["worker"] == wi),
                    key=lambda f: f["last_sent"])
            push = w["pushes"][ss.index(s)]
            marks = [rounds[ss[pi]][t]["start"], b["last_sent"], w["pull"][pi][2], w["woke"],
                     w["push"], push["last_sent"], r["pushes"][wi][2], r["closed"], r["applied"],
                     rounds[s][t + 1]["start"]]
        except (KeyError, IndexError, ValueError):
            continue
        # compute is woke..push minus the pull copy; shown from its own stamp
        spans = [marks[1] - marks[0], marks[2] - marks[1], marks[3] - marks[2],
                 w["push"] - w["compute"], marks[5] - marks[4], marks[6] - marks[5],
                 marks[7] - marks[6], marks[8] - marks[7], marks[9] - marks[8]]
        for (_, xs), v in zip(names, spans):
            xs.append(v / 1e3)
    if not names[0][1]:
        return
    print("critical path of a round (slowest psd, worker and broadcast)")
    for name, xs in names:
        row(name, xs)
    row("sum", [sum(v) for v in zip(*(xs for _, xs in names))])


def main(argv):
    args, job, skip = [], None, 10
    i = 0
    while i < len(argv):
        if argv[i] == "--job":
            job, i = argv[i + 1], i + 2
        elif argv[i] == "--skip":
            skip, i = int(argv[i + 1]), i + 2
        elif argv[i] in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            args.append(argv[i])
            i += 1
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    files, iters, rounds = load(args, job)
    if not iters and not rounds:
        print("round-trace: no trace lines in " + " ".join(args), file=sys.stderr)
        return 1
    print(f"# {len(files)} files, workers {sorted(iters)}, servers {sorted(rounds)}; "
          f"first {skip} iterations skipped")
    print(f"  {'phase (ms unless said)':<44} {'mean':>8} {'median':>8} {'p90':>8}")
    print("worker")
    its = [r for w in iters.values() for t, r in sorted(w.items()) if t >= skip]
    row("iteration", [ms(r["wait"], r["pushed"]) for r in its])
    row("pull wait", [ms(r["wait"], r["woke"]) for r in its], "params of t not yet all here")
    row(" last pull closed -> trainer woke",
        [ms(max(p[2] for p in r["pull"]), r["woke"]) for r in its if r["pull"]],
        "hand-off to the trainer thread")
    row("compute", [ms(r["compute"], r["push"]) for r in its])
    row("push (Send -> every flow done)", [ms(r["push"], r["pushed"]) for r in its])
    fl = [f for r in its for f in r["pushes"]]
    row(" Send -> endpoint took it", [ms(f["submitted"], f["taken"]) for f in fl])
    row(" took -> first datagram", [ms(f["taken"], f["first_sent"]) for f in fl])
    row(" first -> last datagram", [ms(f["first_sent"], f["last_sent"]) for f in fl])
    row(" last datagram -> done (ACK)", [ms(f["last_sent"], f["done"]) for f in fl])
    row(" pacing holds / flow", [f["pacing_holds"] for f in fl], "(count)")
    row(" window holds / flow", [f["window_holds"] for f in fl], "(count)")
    rtt_rows(fl)
    print("server")
    rs = [r for s in rounds.values() for t, r in sorted(s.items()) if t >= skip]
    row("round (start -> applied)", [ms(r["start"], r["applied"]) for r in rs])
    row("broadcast call", [ms(r["start"], r["bcast"]) for r in rs])
    row("waiting for pushes", [ms(r["bcast"], r["closed"]) for r in rs])
    row(" last push closed -> round thread",
        [ms(max(p[2] for p in r["pushes"]), r["closed"]) for r in rs
         if r["pushes"] and all(p[2] for p in r["pushes"])], "hand-off to the round thread")
    row(" push first -> last packet", [ms(p[0], p[1]) for r in rs for p in r["pushes"]])
    row("mean with holes", [ms(r["closed"], r["summed"]) for r in rs])
    row("sum + optimizer + snapshot", [ms(r["summed"], r["applied"]) for r in rs])
    bl = [f["timing"] for r in rs for f in r["bcasts"]]
    row("broadcast flow (Send -> done)", [ms(f["submitted"], f["done"]) for f in bl])
    row(" first -> last datagram", [ms(f["first_sent"], f["last_sent"]) for f in bl])
    row(" last datagram -> done (ACK)", [ms(f["last_sent"], f["done"]) for f in bl])
    row(" pacing holds / flow", [f["pacing_holds"] for f in bl], "(count)")
    row(" window holds / flow", [f["window_holds"] for f in bl], "(count)")
    row(" fair-share cap", [f["cap_bps"] if f["cap_bps"] else None for f in bl],
        f"(Mbit/s; capped in {sum(1 for f in bl if f['cap_bps'])} of {len(bl)} flows)", 1e-6)
    row(" pacing rate", [f["pacing_bps"] for f in bl], "(Mbit/s)", 1e-6)
    rtt_rows(bl)
    critical_path(iters, rounds, skip)
    print("iteration time by tenth of the job (mean ms)")
    for w, tr in sorted(iters.items()):
        ts = sorted(tr)
        n = len(ts)
        if n < 10:
            continue
        parts = []
        for k in range(10):
            seg = [tr[t] for t in ts[k * n // 10:(k + 1) * n // 10]]
            parts.append(statistics.mean(ms(r["wait"], r["pushed"]) or 0 for r in seg))
        print(f"  {w:<12} " + " ".join(f"{x:6.2f}" for x in parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
