#!/usr/bin/env python3
"""A fleet's profiles merged on a Dask cluster: `rivet aggregate` is the map, `rivet merge` the
reduce.

Each host's perf recording becomes a profile on a worker (map: `rivet aggregate REC BINARY`);
profiles already made (counter files, Rivet profiles, fdata of hosts that aggregated their own
samples) join as they are. Then the profiles are merged in a tree of `rivet merge` tasks, FAN_IN
at a time, until one is left. Profiles travel between tasks as bytes through Dask, not through
a shared directory, as they would between machines.

Weights (`PATH:WEIGHT`, as `rivet merge` reads them) are applied where an input enters the
tree, by the first merge it goes through; partial sums are merged with weight 1. Because
`rivet merge` is associative and commutative, the tree gives the bytes one `rivet merge` of
every input (with the same weights) gives, whatever the fan-in and whichever worker runs what.

Usage:
  fleet.py --rivet PATH --binary BIN [--recording REC[:W]]... [--profiles-from LIST]
           -o OUT [--workers N] [--fan-in K] [--scheduler ADDRESS]

Without --scheduler it starts a local cluster of N worker processes (one thread each);
with it, it uses that cluster, whose workers must see the same paths (rivet, the binary, the
recordings). It prints, on standard error, how many worker processes ran tasks.
"""

import argparse
import logging
import os
import re
import subprocess
import sys
import tempfile

from dask.distributed import Client, LocalCluster

# Only a trailing :NUMBER is a weight, as in `rivet merge`.
WEIGHTED = re.compile(r"(.+):([0-9.]+)")


def split_weight(spec):
    m = WEIGHTED.fullmatch(spec)
    return (m.group(1), m.group(2)) if m else (spec, "1")


def run_rivet(args):
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip() or f"{args[:2]} exited with {out.returncode}")


class Leaves:
    """The inputs a profile sums, for messages: how many, and the first few names."""

    SHOWN = 3

    def __init__(self, name=None):
        self.count = 0 if name is None else 1
        self.names = [] if name is None else [name]

    def add(self, other):
        self.count += other.count
        self.names = (self.names + other.names)[: self.SHOWN]

    def __str__(self):
        if self.count == 1:
            return self.names[0]
        more = ", ..." if self.count > len(self.names) else ""
        return f"the sum of {self.count} inputs ({', '.join(self.names)}{more})"


def aggregate(rivet, binary, recording):
    """Map: one host's recording to a profile of `binary`."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "host.prof")
        run_rivet([rivet, "aggregate", recording, binary, "-o", out])
        with open(out, "rb") as f:
            return f.read(), {os.getpid()}, Leaves(f"the profile of {recording}")


def load(path):
    """A profile made elsewhere, read where a task runs (as from a store, in a real fleet)."""
    with open(path, "rb") as f:
        return f.read(), {os.getpid()}, Leaves(path)


def merge(rivet, weights, *parts):
    """Reduce: sums `parts` (bytes, the worker processes that made them and the inputs they
    hold), each weighted."""
    pids = {os.getpid()}
    leaves = Leaves()
    with tempfile.TemporaryDirectory() as d:
        inputs, names = [], {}
        for i, ((data, made_by, held), weight) in enumerate(zip(parts, weights)):
            path = os.path.join(d, f"{i}.prof")
            with open(path, "wb") as f:
                f.write(data)
            inputs.append(f"{path}:{weight}")
            names[path] = str(held)
            pids |= made_by
            leaves.add(held)
        out = os.path.join(d, "sum.prof")
        try:
            run_rivet([rivet, "merge", *inputs, "-o", out])
        except RuntimeError as e:
            # Name the inputs as the user knows them, not by this task's temporary files.
            message = str(e)
            for path in sorted(names, key=len, reverse=True):
                message = message.replace(path, names[path])
            raise RuntimeError(message) from None
        with open(out, "rb") as f:
            return f.read(), pids, leaves


def fleet_merge(client, rivet, binary, recordings, profiles, fan_in):
    leaves = []  # (future, weight)
    for spec in recordings:
        path, weight = split_weight(spec)
        leaves.append((client.submit(aggregate, rivet, binary, path, pure=False), weight))
    for spec in profiles:
        path, weight = split_weight(spec)
        leaves.append((client.submit(load, path, pure=False), weight))
    if not leaves:
        raise RuntimeError("no recordings or profiles to merge")
    # The first level applies the inputs' weights; every level above sums with weight 1.
    level = leaves
    while True:
        groups = [level[i : i + fan_in] for i in range(0, len(level), fan_in)]
        if len(groups) > 1 and len(groups[-1]) == 1:
            # A lone input joins the group before it: it meets the other inputs in this
            # level's merges, where an error names it, not only later inside a partial sum.
            groups[-2] += groups.pop()
        level = [
            (
                client.submit(
                    merge, rivet, [w for _, w in g], *[f for f, _ in g], pure=False
                ),
                "1",
            )
            for g in groups
        ]
        if len(level) == 1:
            return level[0][0].result()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rivet", required=True)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--recording", action="append", default=[], metavar="REC[:W]")
    parser.add_argument("--profiles-from", metavar="LIST",
                        help="a file listing profiles, one PATH[:WEIGHT] a line")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--fan-in", type=int, default=8)
    parser.add_argument("--scheduler", help="address of a running Dask scheduler")
    args = parser.parse_args()
    if args.fan_in < 2:
        parser.error("--fan-in must be at least 2")
    profiles = []
    if args.profiles_from:
        with open(args.profiles_from) as f:
            profiles = [line.rstrip("\n") for line in f if line.strip()]
    rivet = os.path.abspath(args.rivet)

    if args.scheduler:
        cluster, client = None, Client(args.scheduler)
    else:
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1,
                               processes=True, dashboard_address=None,
                               # A failed task is reported once, below, not also in the
                               # workers' logs.
                               silence_logs=logging.CRITICAL)
        client = Client(cluster)
    try:
        data, pids, _ = fleet_merge(client, rivet, os.path.abspath(args.binary),
                                 args.recording, profiles, args.fan_in)
    except (RuntimeError, OSError) as e:
        # One line, whichever task failed: rivet's own error, or a file a task could not read.
        message = f"{e.filename}: {e.strerror}" if isinstance(e, OSError) else str(e)
        print(f"fleet.py: error: {message}", file=sys.stderr)
        return 1
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    # Written beside the destination and renamed: a reader never sees half a profile.
    temp = f"{args.output}.{os.getpid()}.tmp"
    with open(temp, "wb") as f:
        f.write(data)
    os.replace(temp, args.output)
    inputs = len(args.recording) + len(profiles)
    print(f"fleet.py: merged {inputs} inputs in tasks on {len(pids)} worker processes",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
