#!/usr/bin/env python3
"""How ingest, bag import and bag export scale with cores (`make bench-cores`).

Runs every stage at each `-j` in JOBS, one process a run, and records each
run as it finishes: one JSON object a line in OUT/cores.jsonl, with at least
stage, j, games, wall_s, cpu_s (user + system, from the OS) and peak_rss_mb
(the child's ru_maxrss). Then prints the table of speed-ups over `-j 1`.

The stages:
  ingest             GAMES generated games (`chessbench ingest -j J`), with
                     its phases (stream, dedup, boards, commit) from --json
  parallel_validate  pgn-reader's example on the same file (every core):
                     the reference for parsing and validating the games
  disk_write         the disk's write rate for a file of the size the bag
                     export writes (written, fsynced, timed): the bound of a
                     stage that writes faster than the disk takes it
  bag_import         `chessbench bag import -j J` of .bag files written from
                     BAG_GAMES ingested games with SYNTHETIC values (the
                     scale bench's `synth`: a pseudo-random win probability
                     per board and move; action values of every 10th board)
  bag_export         `chessbench bag export -j J` of that split (.bag)
  bag_export_bagz    the same, zstd-compressed records (.bagz), state values
  evals_*            the Lichess evaluation-database reader (benches/evals.rs,
                     `make bench-evals`) on EVALS_LINES SYNTHETIC
                     Lichess-shaped lines: zstd decompression (the floor),
                     a keys-only pass, 10% and every position labelled, at
                     one thread and every core (wall_s is the median pass;
                     vs_floor the ratio to decompression); then
                     `annotate --evals` end to end on 2,500 real games
                     (annotate_evals, boards_per_s). Its whole output is
                     OUT/bench-evals.txt.

Games come from `chessbench generate-games` (real Lichess openings continued
by seeded random play, written as a Lichess dump with clocks), generated on
the machine that runs the bench, in as many processes as it has cores
(seeds 1..P, concatenated). Nothing but the Python standard
library is needed; the binaries are given with --bin (built here by
`make bench-cores`, carried to another machine by scripts/cores-bundle).
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run(cmd, log, env=None, stdout_file=None):
    """Runs cmd; returns (wall_s, cpu_s, peak_rss_mb, stdout text, status)."""
    start = time.monotonic()
    with open(log, "ab") as err:
        err.write(("$ " + " ".join(cmd) + "\n").encode())
        err.flush()
        out = open(stdout_file, "wb") if stdout_file else subprocess.PIPE
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        text = b""
        if stdout_file is None:
            text = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if stdout_file:
            out.close()
    wall = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, usage.ru_maxrss / 1024.0, text.decode(errors="replace"), p.returncode


class Bench:
    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        self.work = os.path.abspath(args.work)
        os.makedirs(self.out, exist_ok=True)
        os.makedirs(self.work, exist_ok=True)
        self.log = os.path.join(self.out, "cores.log")
        self.results = os.path.join(self.out, "cores.jsonl")
        self.rows = []
        self.bin = lambda name: os.path.join(os.path.abspath(args.bin), name)
        self.machine = f"{os.cpu_count()} cores, {cpu_model()}"

    def record(self, row):
        row = {"machine": self.machine, **row}
        self.rows.append(row)
        with open(self.results, "a") as f:
            f.write(json.dumps(row) + "\n")
        extra = ""
        if "phases" in row:
            extra = "  phases " + ", ".join(f"{k} {v:.2f}" for k, v in row["phases"].items())
        cpu = "" if row.get("cpu_s") is None else f"{row['cpu_s']:8.2f} s CPU"
        print(
            f"{row['stage']:<18} -j {row['j']:<3} {row['wall_s']:8.2f} s wall "
            f"{cpu:>14} {row['peak_rss_mb']:8.0f} MB{extra}"
            + (f"  FAILED (exit {row['status']})" if row.get("status") else ""),
            flush=True,
        )

    def games(self, n, name):
        """n generated games in WORK/name.pgn(.zst), in one process a core."""
        zstd = shutil.which("zstd")
        path = os.path.join(self.work, name + (".pgn.zst" if zstd else ".pgn"))
        if os.path.exists(path):
            return path
        procs = max(1, min(os.cpu_count() or 1, n // 1000))
        per = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
        start = time.monotonic()
        parts = []
        running = []
        for i, k in enumerate(per):
            part = f"{path}.part{i}"
            parts.append(part)
            gen = [self.bin("chessbench"), "generate-games", "--games", str(k),
                   "--seed", str(i + 1)]
            if self.args.openings:
                gen += ["--openings", self.args.openings]
            if zstd:
                cmd = " ".join(gen) + f" | {zstd} -1 -q -T1 -o {part}"
                running.append(subprocess.Popen(["sh", "-c", cmd], stderr=subprocess.DEVNULL))
            else:
                running.append(subprocess.Popen(gen, stdout=open(part, "wb"),
                                                stderr=subprocess.DEVNULL))
        for p in running:
            if p.wait() != 0:
                sys.exit(f"chessbench generate-games failed (exit {p.returncode})")
        with open(path + ".tmp", "wb") as out:
            for part in parts:  # zstd frames concatenate into one stream
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
                os.remove(part)
        os.rename(path + ".tmp", path)
        print(f"generated {n} games in {time.monotonic() - start:.1f} s ({procs} processes): "
              f"{path} ({os.path.getsize(path) / 1e6:.0f} MB)", flush=True)
        return path

    def warm(self, path):
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass

    def chessbench(self, stage, j, games, args, extra=None):
        cmd = [self.bin("chessbench")] + args
        wall, cpu, rss, text, status = run(cmd, self.log)
        row = {"stage": stage, "j": j, "games": games, "wall_s": round(wall, 3),
               "cpu_s": round(cpu, 3), "peak_rss_mb": round(rss, 1)}
        if status:
            row["status"] = status
        try:
            summary = json.loads(text)
        except ValueError:
            summary = None
        if extra and summary is not None:
            row.update(extra(summary))
        self.record(row)
        return summary

    def disk_write(self, nbytes):
        path = os.path.join(self.work, "disk-write.tmp")
        block = os.urandom(1 << 20) * 8
        start = time.monotonic()
        cpu0 = os.times()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        written = 0
        while written < nbytes:
            written += os.write(fd, block)
        os.fsync(fd)
        os.close(fd)
        wall = time.monotonic() - start
        cpu1 = os.times()
        os.remove(path)
        self.record({"stage": "disk_write", "j": 1, "games": 0, "wall_s": round(wall, 3),
                     "cpu_s": round((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system), 3),
                     "peak_rss_mb": 0, "bytes": written,
                     "mb_per_s": round(written / 1e6 / wall, 1)})

    def main(self):
        a = self.args
        jobs = a.jobs
        print(f"bench-cores: {self.machine}; ingest {a.games} games, bag stages "
              f"{a.bag_games} games; -j {' '.join(map(str, jobs))}; results {self.results}",
              flush=True)
        if "ingest" in a.stages:
            games = self.games(a.games, f"lichesslike_{a.games}")
            self.warm(games)
            for j in jobs:
                run_dir = os.path.join(self.work, "ingest-run")
                shutil.rmtree(run_dir, ignore_errors=True)

                def phases(s):
                    return {"phases": {k: round(v, 3) for k, v in s["phases"].items()},
                            "dedup_threads": s.get("dedup_threads"),
                            "boards": sum(v["state_value"] for v in s["splits"].values()),
                            "spilled": s["spilled"]}
                self.chessbench("ingest", j, a.games,
                                ["ingest", run_dir, games, "-j", str(j), "--json",
                                 "--no-progress"], phases)
            shutil.rmtree(os.path.join(self.work, "ingest-run"), ignore_errors=True)
            if os.path.exists(self.bin("parallel_validate")):
                wall, cpu, rss, _, status = run([self.bin("parallel_validate"), games], self.log)
                row = {"stage": "parallel_validate", "j": os.cpu_count(), "games": a.games,
                       "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                       "peak_rss_mb": round(rss, 1)}
                if status:
                    row["status"] = status
                self.record(row)
        if "bag" in a.stages:
            games = self.games(a.bag_games, f"lichesslike_{a.bag_games}")
            run_dir = os.path.join(self.work, "bag-source")
            bags = os.path.join(self.work, "bags")
            if not os.path.exists(os.path.join(bags, "state_value_data.bag")):
                shutil.rmtree(run_dir, ignore_errors=True)
                shutil.rmtree(bags, ignore_errors=True)
                os.makedirs(bags)
                subprocess.run([self.bin("chessbench"), "ingest", run_dir, games, "--no-progress"],
                               check=True, stdout=subprocess.DEVNULL)
                start = time.monotonic()
                subprocess.run([self.bin("bench-scale"), "synth", run_dir, bags, "10"],
                               check=True, stdout=subprocess.DEVNULL)
                print(f"synthetic bags written in {time.monotonic() - start:.1f} s", flush=True)
            bag_bytes = sum(os.path.getsize(os.path.join(bags, f)) for f in os.listdir(bags))
            self.disk_write(bag_bytes)
            for f in os.listdir(bags):
                self.warm(os.path.join(bags, f))
            imported = os.path.join(self.work, "imported")
            for j in jobs:
                shutil.rmtree(imported, ignore_errors=True)
                self.chessbench("bag_import", j, a.bag_games,
                                ["bag", "import", imported, "--split", "train", bags,
                                 "-j", str(j), "--json", "--no-progress"],
                                lambda s: {"records": s["state_value_records"]
                                           + s["behavioral_cloning_records"]
                                           + s["action_value_records"],
                                           "phases": s.get("phases"),
                                           "serial": s.get("serial")})
            for stage, flags in [("bag_export", []),
                                 ("bag_export_bagz", ["--compress", "--set", "state_value"])]:
                for j in jobs:
                    out = os.path.join(self.work, "exported")
                    shutil.rmtree(out, ignore_errors=True)
                    self.chessbench(stage, j, a.bag_games,
                                    ["bag", "export", imported, "--split", "train", "-o", out,
                                     "-j", str(j), "--json", "--no-progress"] + flags,
                                    lambda s: {"records": sum(x["records"] for x in s),
                                               "bytes": sum(x["bytes"] for x in s)})
                    shutil.rmtree(out, ignore_errors=True)
        if "evals" in a.stages:
            self.evals()
        self.table()

    def evals(self):
        """benches/evals.rs, its table's rows recorded one by one."""
        exe = self.bin("bench-evals")
        if not os.path.exists(exe):
            sys.exit(f"{exe} is missing (scripts/cores-build builds it)")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, CHESSBENCH_BENCH_LINES=str(self.args.evals_lines),
                   CHESSBENCH_BIN=self.bin("chessbench"), CHESSBENCH_ROOT=root,
                   TMPDIR=self.work)
        text_path = os.path.join(self.out, "bench-evals.txt")
        wall, cpu, rss, _, status = run([exe], self.log, env=env, stdout_file=text_path)
        if status:
            self.record({"stage": "evals", "j": os.cpu_count(), "games": 0,
                         "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                         "peak_rss_mb": round(rss, 1), "status": status})
            return
        for row in evals_rows(open(text_path).read(), self.args.evals_lines):
            self.record(row)

    def table(self):
        base = {}
        for r in self.rows:
            if r["j"] == 1:
                base.setdefault(r["stage"], r)
        disk = next((r for r in self.rows if r["stage"] == "disk_write"), None)
        lines = ["| stage | -j | games | wall s | CPU s | speed-up over -j 1 | peak RSS MB | bound |",
                 "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in self.rows:
            b = base.get(r["stage"])
            speed = f"{b['wall_s'] / r['wall_s']:.2f}x" if b and r["wall_s"] > 0 else ""
            bound = ""
            if r["stage"] == "disk_write":
                bound = f"{r['mb_per_s']:.0f} MB/s"
            elif disk and "bytes" in r and r["stage"].startswith("bag_export"):
                bound = f"writing {r['bytes'] / 1e6:.0f} MB at the disk's rate: " \
                        f"{r['bytes'] / 1e6 / disk['mb_per_s']:.2f} s"
            elif "vs_floor" in r:
                bound = f"{r['lines_per_s']:.0f} lines/s, {r['vs_floor']:.2f}x decompression"
            elif "boards_per_s" in r:
                bound = f"{r['boards_per_s']:.0f} boards labelled/s, {r['passes']} passes"
            cpu = "" if r.get("cpu_s") is None else f"{r['cpu_s']:.2f}"
            games = r.get("lines", r["games"])
            lines.append(f"| {r['stage']} | {r['j']} | {games} | {r['wall_s']:.2f} | "
                         f"{cpu} | {speed} | {r['peak_rss_mb']:.0f} | {bound} |")
        text = "\n".join(lines)
        print("\n" + text)
        with open(os.path.join(self.out, "cores.md"), "w") as f:
            f.write(f"{self.machine}\n\n{text}\n")


def evals_rows(text, lines):
    """The rows of benches/evals.rs's printed tables, as cores.jsonl rows."""
    rss = 0.0
    for line in text.splitlines():
        if line.startswith("peak RSS of this process:"):
            rss = float(line.split(":")[1].split()[0])
    names = {"zstd decompression (the floor)": "evals_decompress",
             "keys only (no position wanted)": "evals_keys",
             "10% of positions wanted": "evals_labelled_10pct",
             "every position wanted": "evals_labelled_all"}
    settings = {"default memory limit": "annotate_evals",
                "a quarter of one pass's room": "annotate_evals_quarter"}
    for line in text.splitlines():
        t = line.split()
        for name, stage in names.items():
            if line.startswith(name) and len(t) >= 7 and t[-1] == "s":
                threads, secs, lps, _mbs, vs, _per = t[-7:-1]
                yield {"stage": stage, "j": int(threads), "games": 0, "lines": lines,
                       "wall_s": float(secs), "cpu_s": None, "peak_rss_mb": rss,
                       "lines_per_s": float(lps), "vs_floor": float(vs.rstrip("x")),
                       "synthetic": True}
        for name, stage in settings.items():
            if line.startswith(name) and len(t) >= 9 and t[-1] == "MB":
                passes, secs, read, commit, lps, bps, _vs, mb = t[-9:-1]
                yield {"stage": stage, "j": os.cpu_count(), "games": 2500,
                       "wall_s": float(secs), "cpu_s": None, "peak_rss_mb": float(mb),
                       "passes": int(passes), "read_s": float(read),
                       "commit_s": float(commit), "boards_per_s": float(bps),
                       "synthetic": True}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True,
                   help="directory with chessbench, bench-scale, bench-evals, parallel_validate")
    p.add_argument("--openings", help="PGN(.zst) of real games whose openings the games "
                                      "replay (default: the ones built into chessbench)")
    p.add_argument("--out", required=True, help="where cores.jsonl, cores.md and cores.log go")
    p.add_argument("--work", default="/tmp/cb-cores", help="generated games and runs")
    p.add_argument("--games", type=int, default=1_000_000)
    p.add_argument("--bag-games", type=int, default=100_000)
    p.add_argument("--jobs", default="",
                   help="thread counts, e.g. '1 4 16' (default: 1, 4, 16 and the cores, "
                        "up to the cores)")
    p.add_argument("--stages", default="ingest,bag,evals",
                   help="comma-separated: ingest, bag, evals")
    p.add_argument("--evals-lines", type=int, default=1_000_000,
                   help="synthetic lines of the evals stage's database")
    a = p.parse_args()
    cores = os.cpu_count() or 1
    if a.jobs:
        a.jobs = [int(x) for x in a.jobs.split()]
    else:
        a.jobs = sorted({j for j in (1, 4, 16) if j <= cores} | {cores})
    a.stages = a.stages.split(",")
    Bench(a).main()


if __name__ == "__main__":
    main()
