"""The ADPSGD exchange's protocol on an in-memory transport: the averaging arithmetic, the
passive's pending delta, and that the weights lock is never held across a send or receive."""

from __future__ import annotations

import queue
import threading

import pytest
import torch

import asr.distributed.exchange as exchange
from asr.distributed.exchange import EXCHANGE, GOODBYE, ActiveExchanger, PassiveServer, header
from asr.distributed.staging import Staging

CPU = Staging(torch.device("cpu"))


class Wire:
    """Two endpoints that pass tensors through queues, like gloo between two learners; a swap
    can be held up (`gate`) to see what the other side does meanwhile."""

    def __init__(self):
        self.headers: queue.Queue = queue.Queue()
        self.to_passive: queue.Queue = queue.Queue()
        self.to_active: queue.Queue = queue.Queue()
        self.gate = threading.Event()
        self.gate.set()
        self.in_swap = threading.Event()

    def endpoint(self, active: bool) -> "Endpoint":
        return Endpoint(self, active)


class Endpoint:
    def __init__(self, wire: Wire, active: bool):
        self.wire, self.active = wire, active

    def send_header(self, values, peer):
        self.wire.headers.put(values.clone())

    def recv_header(self):
        return self.wire.headers.get(timeout=10)

    def swap(self, mine, theirs, peer, active):
        out, into = (
            (self.wire.to_passive, self.wire.to_active) if active else (self.wire.to_active, self.wire.to_passive)
        )
        out.put(mine.clone())
        if not active:
            self.wire.in_swap.set()
            assert self.wire.gate.wait(10)
        theirs.copy_(into.get(timeout=10))


def passive_server(wire: Wire, weights: list[torch.Tensor], lock=None) -> PassiveServer:
    params = weights
    snapshot = lambda into, plus: CPU.snapshot(params, 0, sum(p.numel() for p in params), into, plus)  # noqa: E731
    return PassiveServer(1, [0], wire.endpoint(active=False), snapshot, sum(p.numel() for p in params), 10.0, lock)


def test_one_exchange_leaves_both_sides_with_the_average():
    wire = Wire()
    a, p = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([5.0, -2.0, 0.5])
    server = passive_server(wire, [p])
    active = ActiveExchanger(0, lambda step: 1, [1], wire.endpoint(active=True), CPU, 10.0)
    active.start(0, a.clone(), None)
    delta_active = active.finish(0)
    with server.lock:
        server.wait_idle()
        pending = server.peek_pending()
        server.settle(pending)
    expected = (a + p) / 2
    torch.testing.assert_close(a + delta_active, expected, rtol=0, atol=0)
    torch.testing.assert_close(p + pending, expected, rtol=0, atol=0)
    assert server.peek_pending().abs().max() == 0  # settled
    active.close(1)
    server.close()
    assert server.exchanges == 1 and active.exchanges == 1


def test_the_passive_answers_with_its_weights_plus_what_is_still_pending():
    """Two exchanges before the passive applies anything: the second active sees the first
    average, and the passive ends with the average of all three as ADPSGD's arithmetic says."""
    wire = Wire()
    p = torch.tensor([0.0, 4.0])
    server = passive_server(wire, [p])
    first = ActiveExchanger(0, lambda step: 1, [1], wire.endpoint(active=True), CPU, 10.0)
    w1, w2 = torch.tensor([2.0, 0.0]), torch.tensor([8.0, 8.0])
    first.start(0, w1, None)
    d1 = first.finish(0)
    first.start(1, w2, None)
    d2 = first.finish(1)
    with server.lock:
        server.wait_idle()
        pending = server.peek_pending()
    after_first = (w1 + p) / 2
    torch.testing.assert_close(w1 + d1, after_first)
    torch.testing.assert_close(w2 + d2, (w2 + after_first) / 2)
    torch.testing.assert_close(p + pending, (w2 + after_first) / 2)
    first.close(2)
    server.close()


def test_the_weights_lock_is_free_while_the_passive_sends_and_receives():
    wire = Wire()
    wire.gate.clear()  # the passive's swap blocks until released
    p = torch.tensor([1.0, 1.0])
    server = passive_server(wire, [p])
    active = ActiveExchanger(0, lambda step: 1, [1], wire.endpoint(active=True), CPU, 10.0)
    active.start(0, torch.tensor([3.0, 3.0]), None)
    assert wire.in_swap.wait(10)
    # The passive's main thread can change its weights (take the lock) mid-exchange.
    assert server.lock.acquire(timeout=1.0), "the server holds the weights lock across the network"
    p.add_(1.0)  # a gradient step meanwhile
    server.lock.release()
    wire.gate.set()
    delta = active.finish(0)
    with server.lock:
        server.wait_idle()
        pending = server.peek_pending()
    # The active got the weights as of the exchange's start: (3 + 1) / 2; the passive keeps its
    # later gradient step on top of the same average.
    torch.testing.assert_close(torch.tensor([3.0, 3.0]) + delta, torch.tensor([2.0, 2.0]))
    torch.testing.assert_close(p + pending, torch.tensor([3.0, 3.0]))
    active.close(1)
    server.close()


def test_goodbyes_end_the_server_and_a_stranger_is_an_error():
    wire = Wire()
    server = passive_server(wire, [torch.zeros(2)])
    wire.headers.put(header(7, 0, EXCHANGE))
    server.thread.join(10)
    with pytest.raises(Exception, match="unexpected weight exchange from learner 7"):
        server.close()
    wire = Wire()
    server = passive_server(wire, [torch.zeros(2)])
    wire.headers.put(header(0, 3, GOODBYE))
    server.close()
    assert server.goodbyes == {0}


@pytest.mark.parametrize("active", [True, False])
def test_a_swap_posts_its_receive_before_its_send(monkeypatch, active):
    """gloo moves a tensor only once the peer's receive is posted: with the send posted first,
    the two directions crossed a rate-limited link one after the other (twice the time)."""
    posted = []

    class Done:
        def wait(self):
            return True

    def post(kind):
        def record(tensor, peer, group=None, tag=0):
            posted.append((kind, tag))
            return Done()

        return record

    monkeypatch.setattr(exchange.dist, "irecv", post("recv"))
    monkeypatch.setattr(exchange.dist, "isend", post("send"))
    exchange.PointToPoint(group=None).swap(torch.zeros(3), torch.zeros(3), peer=1, active=active)
    sent, received = (
        (exchange.WEIGHTS_TAG, exchange.REPLY_TAG) if active else (exchange.REPLY_TAG, exchange.WEIGHTS_TAG)
    )
    assert posted == [("recv", received), ("send", sent)]
