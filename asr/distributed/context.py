"""The process's place in a torchrun job: rank, node, device, backend, and the collectives
training needs beyond gradients (object broadcast/gather, sums, the final teardown).

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the node) and the
rendezvous address; `init_distributed` reads them and joins the process group. Without
torchrun (WORLD_SIZE unset or 1) the context is a single learner and every collective is a
no-op, so the training loop has one code path.

Backend: NCCL for CUDA devices, gloo on CPU, chosen from the training device. On GPUs the
default group is `cpu:gloo,cuda:nccl`, so CPU tensors (RNG states, counters) work too.

Failures reach one message whatever the backend: every collective runs inside `collective()`,
which turns an error into a DistributedError naming the learner and what it waited for. NCCL
reports errors from its watchdog thread; with TORCH_NCCL_ASYNC_ERROR_HANDLING=2 (set here,
overriding torchrun's 1, which tears the process down without a word) it aborts the
communicators and the error is raised in the learner's own thread at its next wait, inside
`collective()`. A collective that hangs without an error is caught by `HangWatchdog`, which
names it and the learner the others wait for, and exits: inside the training steps after ten
times the slowest step (at least three minutes); elsewhere (start-up, epoch ends) after three
minutes if no learner is computing any more (all wait in collectives, or the awaited one went
silent), else a minute after distributed.timeout_s.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Iterator

import torch
import torch.distributed as dist

from asr.distributed.config import ALGORITHMS
from asr.utils.device import select_device
from asr.utils.errors import InputError

log = logging.getLogger(__name__)


EXIT_DISTRIBUTED_ERROR = 3


class DistributedError(RuntimeError):
    """A learner stopped answering or a collective failed: the job cannot go on."""


def fail_fast(err: BaseException) -> None:
    """Log why and exit at once: status 3 for a DistributedError, 2 for bad input, else 1.

    Used when a learner of a distributed job fails: a communication thread may be blocked in a
    receive that gloo cannot cancel, and the interpreter's normal exit would wait on it, or
    abort in the process group's destructor; exiting directly is the only way to never hang.
    torchrun then sees the failed learner, stops the others and, with --max-restarts,
    restarts the job from its last checkpoint.
    """
    if isinstance(err, DistributedError):
        status = EXIT_DISTRIBUTED_ERROR
        log.error("%s", err)
    elif isinstance(err, InputError):
        status = 2
        log.error("%s", err)
    else:
        status = 1
        log.error("learner failed", exc_info=err)
    logging.shutdown()
    os._exit(status)


def hang_message(what: str, rank: int, timeout_s: float, detail: str) -> str:
    return (
        f"learner {rank}: {what} failed ({detail}). Another learner died, hung or cannot be reached "
        f"within distributed.timeout_s={timeout_s:g}; see the other learners' logs"
    )


STEP_HANG_MIN_S = 180.0  # a collective inside the training steps is hung after this long...
STEP_HANG_FACTOR = 10.0  # ...or this many times the slowest step so far, whichever is longer
HEARTBEAT_S = 5.0  # how often a learner publishes what it is doing (read when another one hangs)
BACKEND_GRACE_S = 30.0  # inside the steps the backends' own timeouts come this long after the watchdog's


class HangWatchdog:
    """Exits the learner (status 3, with the message) when a thread has been inside one
    collective for too long: the last resort against a communication library that neither
    finishes nor fails.

    Too long is, inside the training steps (`stepping`), STEP_HANG_FACTOR times the slowest
    step seen, at least STEP_HANG_MIN_S. Elsewhere (start-up, where learner 0 may build the
    training index, and epoch ends, where learner 0 evaluates) waiting is normal while another
    learner computes: the wait is a hang after STEP_HANG_MIN_S once no other learner computes
    (each waits in a collective or went silent: a deadlock, a stopped process, a lost host), and
    after distributed.timeout_s and a grace in any case. Every learner publishes what it is doing
    in the job's store every HEARTBEAT_S (from this thread, so a learner stuck in its own
    computation still answers); the message names the learner that is behind.

    The process groups of the training steps follow the same rule (`follow`): their backends'
    own timeout, NCCL's too, is the step limit and BACKEND_GRACE_S while stepping (the watchdog,
    which names the learner behind, comes first where it can see) and distributed.timeout_s outside,
    so that NCCL, whose calls return at once and whose waits happen later in a host sync the
    watchdog cannot see, aborts a hung step's collective within minutes; with
    TORCH_NCCL_ASYNC_ERROR_HANDLING=2 the error then surfaces in the learner, which exits.

    A heartbeat carries a counter, not a time: a learner is silent when its counter has not
    moved for three heartbeats of the reader's own clock, so hosts whose clocks disagree never
    look silent to each other. A reader reads every other learner's heartbeat at most once a
    heartbeat, in one store round trip."""

    def __init__(self):
        self.lock = threading.Lock()
        self.current: dict[
            int, tuple[str, int, float, float, float]
        ] = {}  # thread -> what, rank, timeout_s, since, limit
        self.limit_s = math.inf
        self.thread: threading.Thread | None = None
        self.slowest_step_s = 0.0
        self.step = 0
        self.store = None  # the job's store, for heartbeats
        self.rank, self.world_size = 0, 1
        self.stalled_state: tuple | None = None  # the other learners' waits, unchanged...
        self.stalled_since = 0.0  # ...since then
        self.published = 0  # heartbeats this learner has published
        self.seen: dict[int, tuple[int, float]] = {}  # rank -> (its heartbeat counter, when it last moved)
        self.read_at = -math.inf
        self.read: dict[int, dict] = {}
        self.stopping = threading.Event()
        self._stepping = False
        self.groups: list = []  # process groups whose backends' timeout follows the limit
        self.backend_timeout_s = 0.0  # theirs outside the steps (distributed.timeout_s)
        self.group_timeout_s = 0.0  # what they were last set to

    @property
    def stepping(self) -> bool:
        """Inside the training loop's steps."""
        return self._stepping

    @stepping.setter
    def stepping(self, value: bool) -> None:
        self._stepping = value
        self._update_group_timeouts()

    def follow(self, group, timeout_s: float | None = None) -> None:
        """Bound `group`'s collectives (None: the default group) by the limit of current_limit
        inside the steps, by `timeout_s` (distributed.timeout_s, given once) outside them."""
        self.groups.append(group)
        if timeout_s is not None:
            self.backend_timeout_s = timeout_s

    def _update_group_timeouts(self) -> None:
        limit = self.backend_timeout_s
        if self._stepping:  # a little after the watchdog, whose message names the learner behind
            limit = min(limit, self.current_limit()[0] + BACKEND_GRACE_S)
        if not self.groups or round(limit) == round(self.group_timeout_s):
            return
        self.group_timeout_s = limit
        for group in self.groups:
            dist.distributed_c10d._set_pg_timeout(timedelta(seconds=limit), group)

    def arm(self, limit_s: float, poll_s: float = 1.0) -> None:
        self.limit_s = limit_s
        if self.thread is None:
            self.stopping.clear()
            self.thread = threading.Thread(target=self._watch, args=(poll_s,), name="asr-hang-watchdog", daemon=True)
            self.thread.start()

    def disarm(self, timeout_s: float = 10.0) -> None:
        """Stop the thread before the process group goes: a daemon thread still inside a store
        call when the interpreter exits is killed inside C++ code, and the process aborts
        ("terminate called without an active exception") after its work is done."""
        thread, self.thread = self.thread, None
        if thread is not None:
            self.stopping.set()
            thread.join(timeout_s)
        self.store = None
        self.groups, self.group_timeout_s = [], 0.0

    def attach(self, store, rank: int, world_size: int) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size

    def step_done(self, step: int, seconds: float) -> None:
        self.step = step
        if seconds > self.slowest_step_s:
            self.slowest_step_s = seconds
            self._update_group_timeouts()

    def current_limit(self) -> tuple[float, str]:
        """(seconds, why) a collective started now may take."""
        if self.stepping and self.slowest_step_s > 0:
            limit = max(STEP_HANG_MIN_S, STEP_HANG_FACTOR * self.slowest_step_s)
            if limit < self.limit_s:
                return (
                    limit,
                    f"{STEP_HANG_FACTOR:g} x the slowest step ({self.slowest_step_s:.2f} s), "
                    f"at least {STEP_HANG_MIN_S:g} s",
                )
        return self.limit_s, "distributed.timeout_s and a grace"

    def doing(self) -> tuple[str, bool]:
        """What the main thread does, and whether it waits in a collective."""
        with self.lock:
            main = self.current.get(threading.main_thread().ident)
        where = f"step {self.step + 1}" if self.stepping else "outside the training steps"
        return f"{where}, {main[0] if main else 'computing (not in a collective)'}", main is not None

    def _watch(self, poll_s: float) -> None:
        published = -math.inf
        while not self.stopping.wait(poll_s):
            if self.store is not None and time.monotonic() - published >= HEARTBEAT_S:
                published = time.monotonic()
                self._publish()
            with self.lock:
                current = list(self.current.values())
            for what, rank, timeout_s, since, limit in current:
                waited = time.monotonic() - since
                why = self._why_hung(waited, limit, timeout_s)
                if why:
                    fail_fast(
                        DistributedError(
                            f"learner {rank}: {what} got no answer for {waited:.0f} s ({why}); {self.laggard()}"
                        )
                    )

    def _why_hung(self, waited: float, limit: float, timeout_s: float) -> str:
        """Why a wait of `waited` s under `limit` is a hang ('' if it is not, yet)."""
        if waited > limit:
            why = (
                self.current_limit()[1] if limit < self.limit_s else f"distributed.timeout_s={timeout_s:g} and a grace"
            )
            return f"limit {limit:.3g} s: {why}"
        if limit >= self.limit_s and waited > STEP_HANG_MIN_S and self.stalled_for() > 3 * HEARTBEAT_S:
            return f"after {STEP_HANG_MIN_S:g} s no learner computes any more"
        return ""

    def stalled_for(self) -> float:
        """For how long every other learner has been waiting or silent without moving on (0: one
        computes, or one's step or collective changed): a learner between a step's collectives
        (a backward under DDP counts as one) moves on within a heartbeat or two, a stuck one never."""
        state = self.others_waiting()
        if state is None or state != self.stalled_state:
            self.stalled_state = state
            self.stalled_since = time.monotonic()
        return 0.0 if state is None else time.monotonic() - self.stalled_since

    def heartbeats(self) -> dict[int, dict]:
        """The other learners' last heartbeats (rank -> beat, with `silent_s`: for how long its
        counter has not moved, on this learner's clock); those not published yet are missing.
        Read from the store at most once a heartbeat."""
        now = time.monotonic()
        if now - self.read_at >= HEARTBEAT_S:
            self.read_at, self.read = now, self._read_beats()
        beats = {}
        for rank, beat in self.read.items():
            counter, since = self.seen.get(rank, (None, now))
            if counter != beat["beat"]:
                since = self.read_at
                self.seen[rank] = beat["beat"], since
            beats[rank] = beat | {"silent_s": now - since}
        return beats

    def _read_beats(self) -> dict[int, dict]:
        ranks = [r for r in range(self.world_size) if r != self.rank]
        keys = [f"heartbeat/{r}" for r in ranks]
        if self.store is None or not keys:
            return {}
        if self.store.check(keys):  # one round trip for all (a missing key would block multi_get)
            return {r: json.loads(v) for r, v in zip(ranks, self.store.multi_get(keys))}
        return {r: json.loads(self.store.get(k)) for r, k in zip(ranks, keys) if self.store.check([k])}

    def others_waiting(self) -> tuple | None:
        """Every other learner's (step, what it does) if each has published and now waits in a
        collective or went silent; None if one computes, has not published yet, or is unknown."""
        try:
            beats = self.heartbeats()
        except Exception:  # noqa: BLE001  (the store itself is gone: its host is; the backends' timeouts tell)
            return None
        if len(beats) < self.world_size - 1:
            return None  # a learner still starting up (importing, loading) has not published
        if not all(beat["waiting"] or beat["silent_s"] > 3 * HEARTBEAT_S for beat in beats.values()):
            return None
        return tuple((rank, beat["step"], beat["doing"]) for rank, beat in sorted(beats.items()))

    def _publish(self) -> None:
        doing, waiting = self.doing()
        self.published += 1
        try:
            self.store.set(
                f"heartbeat/{self.rank}",
                json.dumps({"beat": self.published, "step": self.step, "doing": doing, "waiting": waiting}),
            )
        except Exception:  # noqa: BLE001  (a store gone at the end of the job: nothing to tell)
            pass

    def laggard(self) -> str:
        """Which learner the others wait for, from the heartbeats: the one silent the longest,
        else the one furthest behind."""
        try:
            beats = self.heartbeats()
        except Exception as err:  # noqa: BLE001
            return f"the other learners' state is unknown ({type(err).__name__}); see their logs"
        if not beats:
            return "see the other learners' logs"
        rank, beat = min(beats.items(), key=lambda kv: (kv[1]["silent_s"] <= 3 * HEARTBEAT_S, kv[1]["step"]))
        silent = beat["silent_s"]
        state = (
            f"no heartbeat for {silent:.0f} s, last at {beat['doing']}" if silent > 3 * HEARTBEAT_S else beat["doing"]
        )
        return f"learner {rank} is behind ({state})"

    @contextmanager
    def watching(self, what: str, rank: int, timeout_s: float) -> Iterator[None]:
        """One activity per thread (the main thread's collectives, the prefetching thread's claims)."""
        thread = threading.get_ident()
        with self.lock:
            outer = self.current.get(thread)
            self.current[thread] = (what, rank, timeout_s, time.monotonic(), self.current_limit()[0])
        try:
            yield
        finally:
            with self.lock:
                if outer is None:
                    self.current.pop(thread, None)
                else:
                    self.current[thread] = outer


WATCHDOG = HangWatchdog()
WATCHDOG_GRACE_S = 60.0  # beyond distributed.timeout_s: the backends' own timeouts come first


@contextmanager
def collective(what: str, rank: int, timeout_s: float) -> Iterator[None]:
    """Turn a failed or timed-out collective into a DistributedError that says what to check."""
    try:
        with WATCHDOG.watching(what, rank, timeout_s):
            yield
    except RuntimeError as err:
        if isinstance(err, DistributedError):
            raise
        last = (str(err).strip().splitlines() or [""])[-1][:300]
        raise DistributedError(hang_message(what, rank, timeout_s, last)) from err


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def reduction_device(ctx: "DistributedContext") -> torch.device:
    """Where a step's small reductions (token counts) run: on the learner's GPU when NCCL
    serves it, so that they take NCCL like the gradients; else on the CPU, over gloo."""
    return ctx.device if "nccl" in ctx.backend else torch.device("cpu")


def choose_backend(requested: str, device: torch.device) -> str:
    """NCCL for CUDA tensors (with gloo for the CPU ones: counters, RNG states), else gloo."""
    if requested not in ("auto", "gloo", "nccl"):
        raise InputError(f"distributed.backend={requested!r}: choose auto, gloo or nccl")
    if requested == "nccl" and device.type != "cuda":
        raise InputError(
            "distributed.backend=nccl needs CUDA devices (device=cuda or auto on a GPU machine); "
            "use backend=auto or gloo on CPU"
        )
    if device.type == "cuda" and requested in ("auto", "nccl"):
        return "cpu:gloo,cuda:nccl"
    return "gloo"


@dataclass
class DistributedContext:
    algorithm: str = "none"
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str = ""
    timeout_s: float = 1800.0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_writer(self) -> bool:
        """Rank 0 alone writes checkpoints, logs and configs."""
        return self.rank == 0

    # --- collectives (no-ops for one learner) ----------------------------------------------

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        if not self.distributed:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64)
        with collective("sum over learners", self.rank, self.timeout_s):
            dist.all_reduce(tensor)
        return tensor.tolist()

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        if not self.distributed:
            return obj
        holder = [obj]
        with collective("broadcast from learner 0", self.rank, self.timeout_s):
            dist.broadcast_object_list(holder, src=src)
        return holder[0]

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every learner's `obj`, in rank order, on every learner."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        with collective("gathering from all learners", self.rank, self.timeout_s):
            dist.all_gather_object(out, obj)
        return out

    def barrier(self, what: str) -> None:
        """Every learner reaches this point before any goes on. A CPU tensor, so it runs on gloo
        under NCCL too (no device guess, as dist.barrier makes)."""
        if not self.distributed:
            return
        with collective(what, self.rank, self.timeout_s):
            dist.all_reduce(torch.zeros(1))

    def close(self) -> None:
        WATCHDOG.disarm()
        if dist.is_initialized():
            dist.destroy_process_group()


def restart_safe_store(world_size: int, timeout: timedelta):
    """torchrun's shared rendezvous store, with this attempt's keys kept apart (None: not shared).

    torchrun lets the workers use the store of its rendezvous (TORCHELASTIC_USE_AGENT_STORE)
    but does not separate the attempts: after a restart (--max-restarts) the workers read the
    previous attempt's gloo/NCCL addresses and fail to connect (pytorch/pytorch#135712). A
    prefix per attempt keeps them apart; setting TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for
    torchrun avoids the shared store altogether.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size, is_master=False, timeout=timeout
    )
    return dist.PrefixStore(f"asr/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def check_gpus_for_nccl(backend: str, local_world_size: int, gpus: int) -> None:
    """NCCL serves one learner per GPU: with more learners on a node than GPUs, two ranks would
    share one and NCCL would fail at the first collective with a duplicate-GPU error."""
    if "nccl" in backend and local_world_size > gpus:
        raise InputError(
            f"torchrun started {local_world_size} learners on this node but it has {gpus} visible GPU(s); "
            f"NCCL needs one GPU per learner: pass --nproc-per-node={gpus} (or let CUDA_VISIBLE_DEVICES show "
            f"{local_world_size} GPUs), or share GPUs over distributed.backend=gloo"
        )


def validate_launch(algorithm: str, world_size: int) -> None:
    if algorithm not in ALGORITHMS:
        raise InputError(f"distributed.algorithm={algorithm!r}: choose one of {', '.join(ALGORITHMS)}")
    if algorithm == "none" and world_size > 1:
        raise InputError(
            f"torchrun started {world_size} processes but distributed=none; "
            "choose distributed=ssgd, adpsgd or hadpsgd (or run one process)"
        )


def init_distributed(cfg) -> DistributedContext:
    """Join torchrun's process group (if launched by it) and pick this learner's device."""
    dcfg = cfg.distributed
    world_size = env_int("WORLD_SIZE", 1)
    validate_launch(dcfg.algorithm, world_size)
    rank, local_rank = env_int("RANK", 0), env_int("LOCAL_RANK", 0)
    device = select_device(cfg.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    ctx = DistributedContext(
        algorithm=dcfg.algorithm if world_size > 1 else "none",
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=env_int("LOCAL_WORLD_SIZE", world_size),
        device=device,
        timeout_s=float(dcfg.timeout_s),
    )
    if world_size == 1:
        if dcfg.algorithm != "none":
            log.info("distributed=%s with one process: training as a single learner", dcfg.algorithm)
        return ctx
    ctx.backend = choose_backend(dcfg.backend, device)
    check_gpus_for_nccl(ctx.backend, ctx.local_world_size, torch.cuda.device_count() if device.type == "cuda" else 0)
    if "nccl" in ctx.backend:
        os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "2"  # NCCL errors raised in our thread (see above)
    WATCHDOG.arm(ctx.timeout_s + WATCHDOG_GRACE_S)
    if not dist.is_initialized():
        timeout = timedelta(seconds=ctx.timeout_s)
        store = restart_safe_store(world_size, timeout)
        if store is None:
            dist.init_process_group(backend=ctx.backend, timeout=timeout)
        else:
            dist.init_process_group(backend=ctx.backend, timeout=timeout, store=store, rank=rank, world_size=world_size)
    WATCHDOG.attach(dist.PrefixStore("asr/watchdog", dist.distributed_c10d._get_default_store()), rank, world_size)
    WATCHDOG.follow(None, ctx.timeout_s)  # the default group: SSGD's gradients and every step's sums
    log.info(
        "learner %d of %d (local %d of %d) on %s, backend %s, algorithm %s",
        rank,
        world_size,
        local_rank,
        ctx.local_world_size,
        device,
        ctx.backend,
        ctx.algorithm,
    )
    return ctx
