#!/usr/bin/env python3
"""Report-path benchmark (issue 21). Prints JSON.

1. flood: a real operator on the local rig (small profile). This script reads the operator's Lease
   every 0.2 s and records each new renewTime; 60 s quiet, then 60 s of 2,000 requests/s at the
   report endpoint from 200 source addresses in 127.0.0.0/8 (each under the per-source limit) with a
   new bogus token every request: the worst case, every request asks for a TokenReview. Figures: the
   gaps between successive renewals in each phase (p50/p99/max, and flood/quiet ratios), what the
   flood got back (status counts), the operator's CPU seconds, TokenReviews the API server served.
2. memory: in this process, a simulated 16,384-rank job under a stragglerPolicy reporting every 5 s
   for 10 simulated minutes (5 step samples a report) through ReportServer.answer (the endpoint's own
   code: JSON, validation, the identity check, the book; minus the socket and the TokenReview). RSS
   before and after, and per report CPU.

BENCH_FLOOD_SECONDS, BENCH_FLOOD_RATE, BENCH_RANKS, BENCH_MINUTES override the sizes.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from bench.common import HACK, arguments, cluster, fresh_cluster, percentile, rss_mib, wait
from bench.launcher import OperatorProcess
from railyard.operator.kube.client import KubeApi

FLOOD_SECONDS = float(os.environ.get("BENCH_FLOOD_SECONDS", "60"))
FLOOD_RATE = float(os.environ.get("BENCH_FLOOD_RATE", "2000"))
SOURCES = 200
RANKS = int(os.environ.get("BENCH_RANKS", "16384"))
MINUTES = float(os.environ.get("BENCH_MINUTES", "10"))
LEASE_NS = "railyard-bench"
REPORT_PORT = 18090


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class LeaseWatch(threading.Thread):
    """Every distinct renewTime of the operator's Lease, with the phase it was seen in."""

    def __init__(self, api: KubeApi) -> None:
        super().__init__(daemon=True)
        self.api, self.phase, self.stop = api, "quiet", threading.Event()
        self.renewals: list[tuple[str, float]] = []

    def run(self) -> None:
        seen = None
        while not self.stop.is_set():
            try:
                lease = self.api.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/"
                                         "railyard-operator", timeout=5)
                renew = (lease.get("spec") or {}).get("renewTime")
                if renew and renew != seen:
                    seen = renew
                    at = datetime.fromisoformat(renew.replace("Z", "+00:00")).timestamp()
                    self.renewals.append((self.phase, at))
            except Exception:  # a missed read only thins the sample
                pass
            time.sleep(0.2)

    def gaps(self, phase: str) -> dict[str, float | int]:
        times = [t for p, t in self.renewals if p == phase]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        if not gaps:
            return {"renewals": len(times)}
        return {"renewals": len(times), "gap_p50_seconds": percentile(gaps, 50),
                "gap_p99_seconds": percentile(gaps, 99), "gap_max_seconds": round(max(gaps), 3)}


async def _flood(rate: float, seconds: float) -> Counter[str]:
    """`SOURCES` keep-alive connections, one per source address, `rate` requests/s in all."""
    answers: Counter[str] = Counter()
    per = rate / SOURCES
    deadline = time.monotonic() + seconds

    async def one(i: int) -> None:
        source = f"127.0.{1 + i // 250}.{1 + i % 250}"
        n = 0
        while time.monotonic() < deadline:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", REPORT_PORT, local_addr=(source, 0))
            except OSError:
                answers["connect_error"] += 1
                await asyncio.sleep(0.1)
                continue
            start = time.monotonic()
            try:
                while time.monotonic() < deadline:
                    n += 1
                    body = b'{"namespace":"x","job":"y","rank":0,"restartCount":0}'
                    writer.write(f"POST /v1/reports HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer bogus-{i}-{n}\r\n"
                                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                    status = head.split(b" ", 2)[1].decode()
                    length = int(next((h.split(b":")[1] for h in head.split(b"\r\n")
                                       if h.lower().startswith(b"content-length")), b"0"))
                    await reader.readexactly(length)
                    answers[status] += 1
                    if b"close" in head.lower():
                        break
                    pause = start + n / per - time.monotonic()
                    if pause > 0:
                        await asyncio.sleep(pause)
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                answers["dropped"] += 1
            finally:
                writer.close()

    await asyncio.gather(*(one(i) for i in range(SOURCES)))
    return answers


def _token_reviews(api: KubeApi) -> float:
    text = api._send("GET", "/metrics", content_type="text/plain").read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("apiserver_request_total{") and 'resource="tokenreviews"' in line)


def flood() -> dict:
    figures: dict = {"rig": fresh_cluster(None)}
    api = KubeApi(workers=2)
    subprocess.run([str(cluster.binary("kubectl")), "--kubeconfig", str(cluster.KUBECONFIG), "apply", "-f",
                    str(HACK.parent / "crds")], check=True, capture_output=True)
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": LEASE_NS}})
    log_path = cluster.STATE / "logs" / "bench-reports.log"
    operator = OperatorProcess(cluster.KUBECONFIG, LEASE_NS, log_path, metrics_port=0, health_port=0,
                               report_port=REPORT_PORT)
    try:
        wait(lambda: b"became leader" in log_path.read_bytes(), 60, "leader")
        watch = LeaseWatch(KubeApi(workers=1))
        watch.start()
        cpu0, reviews0 = _cpu_seconds(operator.pid), _token_reviews(api)
        time.sleep(FLOOD_SECONDS)
        cpu1, reviews1 = _cpu_seconds(operator.pid), _token_reviews(api)
        watch.phase = "flood"
        started = time.monotonic()
        answers = asyncio.run(_flood(FLOOD_RATE, FLOOD_SECONDS))
        took = time.monotonic() - started
        cpu2, reviews2 = _cpu_seconds(operator.pid), _token_reviews(api)
        watch.stop.set()
        watch.join(5)
        quiet, loud = watch.gaps("quiet"), watch.gaps("flood")
        figures["lease_renewals"] = {"quiet": quiet, "flood": loud}
        if "gap_p99_seconds" in quiet and "gap_p99_seconds" in loud:
            figures["lease_renewals"]["ratio_flood_to_quiet_p99"] = round(loud["gap_p99_seconds"] /
                                                                          quiet["gap_p99_seconds"], 3)
            figures["lease_renewals"]["ratio_flood_to_quiet_max"] = round(loud["gap_max_seconds"] /
                                                                          quiet["gap_max_seconds"], 3)
        total = sum(answers.values())
        figures["flood"] = {"requests": total, "requests_per_second": round(total / took, 1),
                            "answers": dict(answers), "sources": SOURCES,
                            "operator_cpu_seconds": {"quiet": round(cpu1 - cpu0, 1), "flood": round(cpu2 - cpu1, 1)},
                            "token_reviews_served": {"quiet": reviews1 - reviews0, "flood": reviews2 - reviews1},
                            "operator_rss_mib": rss_mib(operator.pid)}
        figures["still_leader"] = b"lost leadership" not in log_path.read_bytes()
    finally:
        operator.stop(timeout=30)
        subprocess.run([sys.executable, str(HACK / "cluster.py"), "down"],
                       capture_output=True)
    return figures


def memory() -> dict:
    from railyard.operator.base.objects import parse_job, pod_view
    from railyard.operator.base.settings import ReportSettings
    from railyard.operator.cache.progress_book import ProgressBook
    from railyard.operator.cache.state import ClusterState
    from railyard.operator.kube.bounded_http import Request
    from railyard.operator.kube.report_server import PodIdentity, ReportServer

    state = ClusterState()
    job = parse_job({"metadata": {"name": "big", "namespace": "ml", "uid": "job"},
                     "spec": {"replicas": RANKS, "stragglerPolicy": {"action": "Report"},
                              "template": {"spec": {"containers": [{"name": "c"}]}}},
                     "status": {"restartCount": 0}})
    state.jobs[job.key] = job
    for r in range(RANKS):
        pod = pod_view({"metadata": {"name": f"big-{r}", "namespace": "ml", "uid": f"u{r}",
                                     "ownerReferences": [{"uid": "job", "controller": True}],
                                     "labels": {"railyard.dev/job-name": "big", "railyard.dev/rank": str(r),
                                                "railyard.dev/restart-count": "0"}}, "spec": {}, "status": {}})
        state.pods[pod.key] = pod
    book = ProgressBook()
    server = ReportServer(state, book, None, ReportSettings(port=0, rate_per_second=1e9,  # type: ignore[arg-type]
                                                            source_rate_per_second=1e9), lambda: True)
    identities = {f"t{r}": PodIdentity("ml", f"big-{r}", f"u{r}") for r in range(RANKS)}
    far = time.monotonic() + 1e9
    server._identities = {__import__("hashlib").sha256(t.encode()).hexdigest(): (who, far)
                          for t, who in identities.items()}
    gc.collect()
    before = rss_mib(os.getpid())
    rounds = int(MINUTES * 60 / 5)
    started = time.process_time()

    async def feed() -> None:
        step = 0
        for _ in range(rounds):
            for r in range(RANKS):
                samples = [[step + s, 0.9 + r % 7 * 0.01, 1.0] for s in range(5)]
                body = json.dumps({"namespace": "ml", "job": "big", "rank": r, "restartCount": 0,
                                   "step": step + 4, "samples": samples,
                                   "checkpoints": [{"step": step, "path": f"/ckpt/{step}"}]}).encode()
                status, _ = await server.answer(Request("POST", "/v1/reports", f"10.0.{r // 250}.{r % 250}",
                                                        {"authorization": f"Bearer t{r}"}, body))
                assert status == 200
            step += 5

    asyncio.run(feed())
    cpu = time.process_time() - started
    gc.collect()
    after = rss_mib(os.getpid())
    kept = statistics.mean(len(p.samples) for p in book.jobs[job.key].ranks.values())
    return {"ranks": RANKS, "simulated_minutes": MINUTES, "reports": rounds * RANKS,
            "rss_mib_before": before, "rss_mib_after": after, "rss_growth_mib": round(after - before, 1),
            "samples_kept_per_rank_mean": round(kept, 1),
            "cpu_microseconds_per_report": round(cpu / (rounds * RANKS) * 1e6, 1)}


def main() -> None:
    arguments(__doc__)
    figures: dict = {"machine": {"cpus": os.cpu_count()}}
    figures["memory_16k_ranks"] = memory()
    print(json.dumps(figures), file=sys.stderr, flush=True)
    figures.update(flood())
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
