#!/usr/bin/env python3
"""Load and abuse measurements of a running `kvserve serve` (loopback), standard library only.

  server_load.py --port P streams N       hold N SSE streams on /generate, measure /health
                                          latency meanwhile and the server's memory per stream
  server_load.py --port P slowloris N     N connections trickling one header line a second;
                                          /health latency meanwhile, and when they are closed
  server_load.py --port P framing         time to answer each malformed-framing request

Prints one JSON object per measurement (for docs/perf/). --pid gives the server's pid for memory
(VmRSS from /proc); --seconds how long to hold the load.
"""
import argparse
import json
import selectors
import socket
import statistics
import sys
import threading
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def health_latencies(port, count, interval, out, stop=None):
    """Sequential GET /health on fresh connections; appends seconds (or None on failure)."""
    for _ in range(count):
        if stop is not None and stop.is_set():
            break
        start = time.perf_counter()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            s.close()
            ok = data.startswith(b"HTTP/1.1 200")
            out.append(time.perf_counter() - start if ok else None)
        except OSError:
            out.append(None)
        time.sleep(interval)


def summarize(lat):
    ok = sorted(x for x in lat if x is not None)
    if not ok:
        return {"requests": len(lat), "failed": len(lat)}
    q = lambda p: ok[min(len(ok) - 1, int(p * len(ok)))] * 1000
    return {
        "requests": len(lat),
        "failed": len(lat) - len(ok),
        "p50_ms": round(q(0.50), 2),
        "p99_ms": round(q(0.99), 2),
        "max_ms": round(ok[-1] * 1000, 2),
        "mean_ms": round(statistics.mean(ok) * 1000, 2),
    }


def streams(args):
    body = json.dumps({
        "input_ids": [5, 6, 7, 8],
        "stream": True,
        "sampling_params": {"max_new_tokens": args.max_new_tokens, "ignore_eos": True},
    }).encode()
    request = (b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
    rss0 = rss_kib(args.pid) if args.pid else 0
    threads0 = threads_of(args.pid) if args.pid else 0
    sel = selectors.DefaultSelector()
    socks = []
    started = {}
    t0 = time.perf_counter()
    for i in range(args.n):
        s = socket.create_connection(("127.0.0.1", args.port), timeout=30)
        s.sendall(request)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
        socks.append(s)
    connect_s = time.perf_counter() - t0
    received = [0] * args.n
    status_ok = [None] * args.n
    closed = [False] * args.n

    def pump(until):
        while time.perf_counter() < until:
            for key, _ in sel.select(timeout=0.05):
                i = key.data
                try:
                    data = key.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fileobj)
                    closed[i] = True
                    continue
                if status_ok[i] is None:
                    status_ok[i] = data.startswith(b"HTTP/1.1 200")
                received[i] += len(data)

    # Until every stream has its response head, then hold.
    pump(time.perf_counter() + args.settle)
    answered = sum(1 for x in status_ok if x)
    lat = []
    stop = threading.Event()
    t = threading.Thread(target=health_latencies, args=(args.port, 100000, 0.02, lat, stop))
    t.start()
    pump(time.perf_counter() + args.seconds)
    stop.set()
    t.join()
    rss1 = rss_kib(args.pid) if args.pid else 0
    threads1 = threads_of(args.pid) if args.pid else 0
    info = None
    try:
        s = socket.create_connection(("127.0.0.1", args.port), timeout=10)
        s.sendall(b"GET /get_server_info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        info = json.loads(data.split(b"\r\n\r\n", 1)[1])
    except (OSError, ValueError):
        pass
    held = sum(1 for i in range(args.n) if status_ok[i] and not closed[i])
    result = {
        "measurement": "sse_streams",
        "streams_opened": args.n,
        "connect_seconds": round(connect_s, 2),
        "streams_answered_200": answered,
        "streams_still_open": held,
        "streams_closed_early": sum(closed),
        "bytes_received": sum(received),
        "health_under_load": summarize(lat),
        "server_rss_kib_before": rss0,
        "server_rss_kib_held": rss1,
        "server_threads_before": threads0,
        "server_threads_held": threads1,
        "rss_kib_per_stream": round((rss1 - rss0) / args.n, 1) if args.pid else None,
        "num_running_reqs": info and info.get("num_running_reqs"),
        "num_waiting_reqs": info and info.get("num_waiting_reqs"),
    }
    for s in socks:
        s.close()
    print(json.dumps(result))


def slowloris(args):
    socks = []
    for _ in range(args.n):
        s = socket.create_connection(("127.0.0.1", args.port), timeout=30)
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    lat = []
    stop = threading.Event()
    t = threading.Thread(target=health_latencies, args=(args.port, 100000, 0.02, lat, stop))
    t.start()
    start = time.perf_counter()
    closed_at = {}
    while time.perf_counter() - start < args.seconds and len(closed_at) < args.n:
        for i, s in enumerate(socks):
            if i in closed_at:
                continue
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                closed_at[i] = time.perf_counter() - start
        time.sleep(1.0)
    stop.set()
    t.join()
    for s in socks:
        s.close()
    closes = sorted(closed_at.values())
    print(json.dumps({
        "measurement": "slowloris",
        "connections": args.n,
        "closed_by_server": len(closes),
        "first_close_s": round(closes[0], 1) if closes else None,
        "last_close_s": round(closes[-1], 1) if closes else None,
        "health_meanwhile": summarize(lat),
    }))


def framing(args):
    post = b"POST /generate HTTP/1.1\r\nHost: x\r\n"
    cases = {
        "negative chunk size": post + b"Transfer-Encoding: chunked\r\n\r\n-1\r\n",
        "Transfer-Encoding: gzip, chunked": post + b"Transfer-Encoding: gzip, chunked\r\n\r\n",
        "50 MB Content-Length, headers only": post + b"Content-Length: 52428800\r\n\r\n",
        "conflicting Content-Length": post + b"Content-Length: 2\r\nContent-Length: 9\r\n\r\n{}",
        "20 KB header": post + b"X-Big: " + b"a" * 20000 + b"\r\n\r\n",
        "head never finished (header timeout)": post,
    }
    for name, raw in cases.items():
        s = socket.create_connection(("127.0.0.1", args.port), timeout=60)
        start = time.perf_counter()
        s.sendall(raw)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        s.close()
        print(json.dumps({
            "measurement": "framing",
            "case": name,
            "answer": data.split(b"\r\n", 1)[0].decode(errors="replace"),
            "seconds": round(time.perf_counter() - start, 3),
        }))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--pid", type=int, default=0)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--settle", type=float, default=10, help="seconds to let streams start")
    p.add_argument("--max-new-tokens", type=int, default=100000)
    p.add_argument("what", choices=["streams", "slowloris", "framing"])
    p.add_argument("n", type=int, nargs="?", default=0)
    args = p.parse_args()
    {"streams": streams, "slowloris": slowloris, "framing": framing}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
