"""A process group on this machine: one spawned process per rank, bounded in time.

Shared by the distributed benchmark and tests. ``run_ranks`` starts ``world`` processes,
each initialises the default group on 127.0.0.1 (gloo on CPU, NCCL with one GPU per rank)
and runs a module-level function; the results come back by rank. A rank that fails stops
the run; any rank still alive at the end (waiting for a failed peer in a collective)
writes its stacks to stderr and is killed, so no process outlives the call.
"""

from __future__ import annotations

import datetime
import faulthandler
import multiprocessing as mp
import os
import queue
import signal
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

# A hung collective fails the rank; a loaded 2-core machine may take minutes between two.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=240)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(
    fn: Callable[..., Any], rank: int, world: int, backend: str, port: int, kwargs: dict, results: Any
) -> None:
    # On a failure elsewhere the parent asks for this rank's stacks: where it waits is the
    # other half of a collective that timed out.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        device_id = None
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device_id = torch.device("cuda", rank)
        else:
            torch.set_num_threads(max(1, torch.get_num_threads() // world))  # ranks share the cores
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=COLLECTIVE_TIMEOUT,
            device_id=device_id,
        )
        try:
            out = fn(rank, world, **kwargs)
        finally:
            dist.destroy_process_group()
        results.put((rank, True, out))
    except BaseException:
        results.put((rank, False, traceback.format_exc()))


def run_ranks(
    fn: Callable[..., Any], *, world: int = 2, backend: str = "gloo", timeout: float = 300.0, **kwargs: Any
) -> list[Any]:
    """``fn(rank, world, **kwargs)`` in ``world`` fresh processes; their results by rank.

    ``fn`` and its results must pickle. Raises if a rank fails, dies or outlives ``timeout``.
    """
    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port()
    procs = [
        context.Process(target=_rank_main, args=(fn, rank, world, backend, port, kwargs, results))
        for rank in range(world)
    ]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout
    done: dict[int, Any] = {}
    try:
        while len(done) < world:
            if time.monotonic() > deadline:
                missing = sorted(set(range(world)) - set(done))
                raise TimeoutError(f"ranks {missing} still running after {timeout:.0f}s")
            try:
                rank, ok, payload = results.get(timeout=1.0)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in done]
                if dead:
                    raise RuntimeError(f"rank(s) {dead} exited without a result") from None
                continue
            if not ok:
                raise RuntimeError(f"rank {rank} failed:\n{payload}")
            done[rank] = payload
    except BaseException:
        _dump_stacks([p for r, p in enumerate(procs) if r not in done])
        raise
    finally:
        for proc in procs:
            proc.join(timeout=max(1.0, min(10.0, deadline - time.monotonic())))
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
        results.close()
    return [done[r] for r in range(world)]


def _dump_stacks(procs: list[Any]) -> None:
    """Each live rank writes its threads' stacks to its stderr (the parent's, inherited)."""
    live = [p for p in procs if p.is_alive() and p.pid is not None]
    for proc in live:
        os.kill(proc.pid, signal.SIGUSR1)
    if live:
        time.sleep(2.0)
