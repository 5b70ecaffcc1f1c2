#!/usr/bin/env python3
"""Per-node medians of replayed CUDA graphs from a kernel_timeline.c trace.

Every kernel of one graph launch shares the launch's correlation id, so a replay is the set of
records with one (graph id, correlation id). For each graph this prints how many replays it had
and their median span (first start to last end); for the chosen graphs, each node in start order
with medians over the replays of:
  dur    its own time, start to end;
  gap    its start minus the previous node's end (negative: it started early, as a dependent
         launch does, and overlapped the node ahead);
  adds   its end minus the latest end before it: what it adds to the chain.
and the same figures summed by kernel name over the nodes of the graph.

  summarize.py TRACE.csv [--graph ID ...] [--min-nodes N] [--limit-nodes N]
"""
import argparse
import csv
import statistics
from collections import defaultdict


def read_replays(path):
    """Kernels of graph replays by (graph, correlation). Rows cut short (a process stopped while
    the tracer wrote its last line) are skipped and counted; a name with commas (C++ templates,
    other libraries' kernels in the same process) keeps its first part."""
    replays = defaultdict(list)
    skipped = 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                graph = int(row["graph_id"])
                key = (graph, int(row["correlation_id"]))
                kernel = (int(row["start_ns"]), int(row["end_ns"]), row["name"], row["grid"])
            except (TypeError, ValueError):
                skipped += 1
                continue
            if graph == 0 or kernel[2] is None:
                continue
            replays[key].append(kernel)
    if skipped:
        print(f"({skipped} row(s) cut short, skipped)")
    by_graph = defaultdict(list)
    for (graph, _), kernels in replays.items():
        by_graph[graph].append(sorted(kernels))
    return by_graph


def node_rows(replays):
    """Per position: the name, grid and the three series over replays (us)."""
    count = statistics.mode(len(r) for r in replays)
    replays = [r for r in replays if len(r) == count]
    rows = []
    for i in range(count):
        durs, gaps, adds = [], [], []
        for r in replays:
            start, end, _, _ = r[i]
            durs.append((end - start) / 1e3)
            if i == 0:
                gaps.append(0.0)
                adds.append((end - start) / 1e3)
            else:
                latest = max(e for _, e, _, _ in r[:i])
                gaps.append((start - r[i - 1][1]) / 1e3)
                adds.append((end - latest) / 1e3)
        rows.append((replays[0][i][2], replays[0][i][3], durs, gaps, adds))
    return len(replays), rows


def short(name, width=48):
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--graph", type=int, action="append", default=[])
    parser.add_argument("--min-nodes", type=int, default=0)
    parser.add_argument("--limit-nodes", type=int, default=60)
    args = parser.parse_args()

    by_graph = read_replays(args.trace)
    med = statistics.median
    print("graph  nodes  replays  median span us")
    for graph in sorted(by_graph):
        replays = by_graph[graph]
        spans = [(r[-1][1] - r[0][0]) / 1e3 for r in replays]
        print(f"{graph:5d}  {len(replays[0]):5d}  {len(replays):7d}  {med(spans):10.1f}")

    chosen = args.graph or [g for g in sorted(by_graph) if len(by_graph[g][0]) >= args.min_nodes]
    for graph in chosen:
        used, rows = node_rows(by_graph[graph])
        print(f"\ngraph {graph}: {len(rows)} nodes, medians of {used} replays (us)")
        print(f"{'#':>3} {'kernel':48} {'grid':>12} {'dur':>7} {'gap':>7} {'adds':>7}")
        for i, (name, grid, durs, gaps, adds) in enumerate(rows[: args.limit_nodes]):
            print(f"{i:3d} {short(name):48} {grid:>12} {med(durs):7.2f} {med(gaps):7.2f} {med(adds):7.2f}")
        totals = defaultdict(lambda: [0, 0.0, 0.0])
        for name, _, durs, _, adds in rows:
            t = totals[name]
            t[0] += 1
            t[1] += med(durs)
            t[2] += med(adds)
        print(f"\nby kernel: {'kernel':48} {'nodes':>5} {'dur sum':>8} {'adds sum':>8}")
        for name, (n, d, a) in sorted(totals.items(), key=lambda kv: -kv[1][2]):
            print(f"           {short(name):48} {n:5d} {d:8.1f} {a:8.1f}")


if __name__ == "__main__":
    main()
