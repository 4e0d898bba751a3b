"""Many jobs on threads, each result saved as it completes, so that an interrupted run keeps what finished (used by
`mrgrpo data prepare`'s reference runs and `mrgrpo score`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any


def map_saving(fn: Callable[[Any], Any], items: Sequence[Any], on_done: Callable[[int, Any], None], workers: int,
               progress: bool = False, desc: str = "") -> list[Any]:
    """``[fn(x) for x in items]`` on ``workers`` threads; ``on_done(i, result)`` runs in the calling thread as each
    item completes (save it there). Results in input order.

    Ctrl-C (KeyboardInterrupt in the calling thread): queued items are cancelled, items already running are
    finished and passed to ``on_done`` (a second Ctrl-C stops waiting for them), then KeyboardInterrupt is
    raised again for the caller to report what is saved."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    results: list[Any] = [None] * len(items)
    if not items:
        return results
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(items), file=sys.stderr, desc=desc or None, unit="job", leave=False)
    ex = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="mrgrpo-saving")
    futures = {ex.submit(fn, item): i for i, item in enumerate(items)}
    pending = set(futures)

    def collect(done) -> None:
        for fut in done:
            pending.discard(fut)
            if fut.cancelled():
                continue
            i = futures[fut]
            results[i] = fut.result()
            on_done(i, results[i])
            if bar is not None:
                bar.update(1)

    try:
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            collect(done)
    except KeyboardInterrupt:
        for fut in pending:
            fut.cancel()  # queued work: dropped
        try:
            running = [f for f in pending if not f.cancelled()]
            done, _ = wait(running)
            collect([f for f in done if f.exception() is None])
        except KeyboardInterrupt:
            pass
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    ex.shutdown(wait=True)
    return results


__all__ = ["map_saving"]
