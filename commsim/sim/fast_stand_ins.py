"""Doubling all-reduces beside slow links replayed by class, with stand-ins, for the fast
engine.

Recursive doubling and Rabenseifner over a power of two of hosts, several ranks a host, with
one host h0 behind a slow link: hosts stand in classes by z = h ^ h0, mostly by the highest
and the lowest set bit of z (``docs/model.md``; read off whole replays at 256-4,096 ranks):
n(n + 1)/2 + 1 classes over 2^n hosts, 121 at 32,768.  A replay of every rank is millions of
messages there (seconds); one host a class is a few hundred ranks.  But the classes do not
pair off: at the step flipping host bit k, the hosts of the class whose highest bit is k (or
whose lowest is) meet hosts of several classes, alike at that step and apart at others, so one
host of a class cannot exchange with one host of each (counting real hosts whose partners are
real hosts too needs 2^(k - l) hosts a class).  Stand-ins do instead:

1. Classes (``classes``): per host, its class by (highest, lowest) set bit of z (0: h0);
   beside several slow hosts, by its class beside each at once (188 to 322 at 32,768 hosts
   beside two).
2. The plan (``plan``): at each step between hosts, each class's host exchanges with the host
   of its model, one of the classes its hosts meet (``_models``): itself where its hosts meet
   one another (one message, leaving its transmit direction and entering its receive
   direction, a partner's that acts alike); a class that pairs off with it (each the other's
   model); else a stand-in for the model's host: its message to it holds its own transmit
   direction and takes the model's receive direction as the model's message in does, and the
   stand-in's message to it takes the model's transmit direction as the model's message out
   does and holds its own receive direction (``fast_queues.simulate``'s followers,
   ``STAND_IN``); the model's ranks post the stand-in's sides (``fast_queues.GHOST``) as they
   post their own.  The replay (``fast._slow_link_stand_ins``): every tensor or DDP bucket at
   once (``added``), one host a class.
3. The check (``parted``, after the replay): every follower started and was granted its
   directions at its leader's instants, so every real message acts as its class's and each
   class's hosts as its replayed host.  A follower that acted apart shows which hosts act apart
   from their class's: those of the model's class that meet the follower's class at that bit,
   which are split off (``refined``: with the subcube around a host that acts apart alone)
   and the whole replayed again, while the rounds replay fewer hosts together than a quarter
   of the cluster's; otherwise the caller replays every rank.  (At 32,768 hosts a ring of VGG-11's
   tensors beside a 10 Mbit/s link splits the hosts that met, in the last halving steps, the
   hosts the slow host delayed first: 121 classes, then 129.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commsim.sim import fast_queues


def _bits(v) -> tuple[np.ndarray, np.ndarray]:
    """Per value (> 0), its highest and its lowest set bit."""
    high = np.zeros(v.shape, dtype=np.int64)
    rest = v.copy()
    while np.any(rest > 1):
        more = rest > 1
        high[more] += 1
        rest[more] >>= 1
    low = np.log2(v & -v).astype(np.int64)
    return high, low


def classes(hosts: int, *slow: int) -> np.ndarray:
    """Per host, its class beside the slow hosts: beside one, h0, 0 for h0, then by (highest,
    lowest set bit) of z = h ^ h0 (highest j, lowest i: j(j + 1)/2 + i), numbered densely;
    beside several, by its class beside each (188 to 322 classes beside two at 32,768
    hosts)."""
    out = np.zeros(hosts, dtype=np.int64)
    for h0 in slow:
        z = np.arange(hosts, dtype=np.int64) ^ h0
        mine = np.zeros(hosts, dtype=np.int64)
        some = z > 0
        high, low = _bits(z[some])
        mine[some] = 1 + high * (high + 1) // 2 + low
        out = np.unique(out * (mine.max() + 1) + mine, return_inverse=True)[1].astype(np.int64)
    return out


@dataclass(frozen=True)
class Plan:
    """One doubling all-reduce replayed on one host a class.

    messages:  per step, its messages' columns (src, dst, bytes per byte of the collective,
               latency, seconds a byte, tx host, rx host, leader), src and dst as positions
               (class x ranks a host + rank), leaders as ids within the step (-1: none).
    parts:     per step, per message, the class a follower stands in for and the class of the
               host it leaves or enters, and the host bit the step flips (-1 for a message
               that follows nothing): where it does not act as its leader, the hosts of the
               first class that meet the second act apart from the class's replayed host.
    rows:      the actions of every position (``fast_queues.ROW``'s columns: kind, first
               and second integer, reduction seconds per byte of the collective), position by
               position, message ids counted from the collective's first: per step a GHOST
               row for each stand-in side it posts, its EXCHANGE (sent, received), its
               reduction; the divide last (dropped without ``average``).
    bounds:    where each position's rows begin (and the end).
    """
    messages: list
    parts: list
    rows: tuple
    bounds: np.ndarray


def plan(run, cls, steps: list) -> Plan | None:
    """The ``Plan`` of an all-reduce of ``steps`` (``fast_collectives.doubling_steps``) over
    every rank of ``run``'s world (a power of two of hosts, several ranks each) by the classes
    ``cls`` (per host, 0 .. count - 1), replayed on each class's first host (``run``'s ranks:
    theirs, class by class); None where a follower's link is not its leader's."""
    rph, hosts = run.rph, cls.size
    reps = run.ranks[::rph] // rph                  # (per class, its replayed host)
    count = reps.size
    width = count * rph
    every, pos = np.arange(hosts), np.arange(width)
    all_messages, all_parts = [], []
    rows = []                # per step, the table's rows: (position, kind, a, b, s per byte)
    first = 0

    def reductions(seconds_per_B: float) -> tuple:
        """A reduction's row for every position."""
        zero = np.zeros(width, np.int64)
        return pos, np.full(width, fast_queues.GLOO), zero, zero, np.full(width, seconds_per_B)

    for dist, mult, work in steps:
        if dist < rph:                           # inside a host: each rank with its mate's
            mate = pos ^ dist
            ranks = reps[pos // rph] * rph + pos % rph
            lat, per_byte, _ = run.link(ranks, ranks ^ dist, "all_reduce")
            none = np.full(width, -1)
            cols = [pos, mate, np.full(width, mult), lat, per_byte, none, none, none]
            parts = np.stack([none, none, none])
            rows.append((pos, np.full(width, fast_queues.EXCHANGE), first + pos, first + mate,
                         np.zeros(width)))
        else:
            k = (dist // rph).bit_length() - 1
            met = np.flatnonzero(np.bincount(cls * count + cls[every ^ (1 << k)],
                                             minlength=count * count))   # (class, partner's)
            meets: dict = {}
            for a, b in zip((met // count).tolist(), (met % count).tolist()):
                meets.setdefault(a, []).append(b)
            step = _step(run, reps, meets, k, mult, first, rows)
            if step is None:
                return None
            cols, parts = step
        if work:
            rows.append(reductions(work))
        all_messages.append(cols)
        all_parts.append(parts)
        first += cols[0].size
    rows.append(reductions(run.costs.gamma_s_per_B))       # (the divide)
    at, kinds, a, b, work = (np.concatenate([row[i] for row in rows]) for i in range(5))
    # (a stable sort by position keeps each position's rows in the order it takes them)
    order = np.argsort(at, kind="stable")
    bounds = np.zeros(width + 1, dtype=np.int64)
    np.cumsum(np.bincount(at, minlength=width), out=bounds[1:])
    table = (kinds[order].astype(np.int32), a[order].astype(np.int64),
             b[order].astype(np.int64), work[order].astype(np.float64))
    return Plan(all_messages, all_parts, table, bounds)


def _models(meets: dict) -> dict:
    """Per class, the class whose host its host exchanges with at a step (its model): itself
    where its hosts meet one another, else a class that meets it where they pair off (each
    the other's model), else the first class it meets (a stand-in for that class's host)."""
    model = {a: a for a, theirs in meets.items() if a in theirs}
    for a, theirs in meets.items():
        if a not in model:
            b = next((b for b in theirs if b not in model and a in meets[b]), None)
            if b is not None:
                model[a], model[b] = b, a
    for a, theirs in meets.items():
        model.setdefault(a, theirs[0])
    return model


def _step(run, reps, meets: dict, k: int, mult: float, first: int, rows: list):
    """One step between hosts (flipping host bit k): its messages' columns and parts, and
    each position's rows of the actions' table appended to ``rows`` (``plan``'s; its
    messages' ids from ``first``); None where a follower's link is not its leader's.

    Each class's host exchanges with its model's (``_models``): with itself (one message,
    leaving its transmit direction and entering its receive direction: a partner that acts
    alike), with a class that pairs off with it (one message each way), or with a stand-in
    for its model's host: its message to it follows the model's message in (whose receive
    direction it takes), the stand-in's message to it follows the model's message out (whose
    transmit direction it takes), and the model's ranks post the stand-in's sides (a GHOST
    row each, in the order of the messages, before their own exchange)."""
    rph, count, stand_in = run.rph, reps.size, fast_queues.STAND_IN
    model = _models(meets)
    cl = np.arange(count)
    of = np.array([model[a] for a in range(count)], dtype=np.int64)
    mirror = of == cl
    pair = ~mirror & (of[of] == cl)
    stand = ~mirror & ~pair
    lower = pair & (cl < of)                 # (a pair's messages, both, at its lower class)
    # Per class, its messages to and from its model (a rank's, in class order): one of its
    # own, two of its own, or its pair's two.
    place = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.where(mirror, 1, np.where(stand | lower, 2, 0)), out=place[1:])
    n, place = int(place[-1]), place[:-1]
    out = place.copy()
    back = np.where(mirror, place, place + 1)
    upper = pair & ~lower
    out[upper], back[upper] = place[of[upper]] + 1, place[of[upper]]
    src, dst, tx, rx, own, by = (np.empty(n, dtype=np.int64) for _ in range(6))
    lead = np.full(n, -1, dtype=np.int64)
    a, i = cl[mirror], place[mirror]
    src[i] = dst[i] = own[i] = by[i] = a
    tx[i] = rx[i] = reps[a]
    a, b, i = cl[lower], of[lower], place[lower]     # (a pair: its message, the other's)
    src[i], dst[i], tx[i], rx[i], own[i], by[i] = a, b, reps[a], reps[b], a, b
    j = i + 1
    src[j], dst[j], tx[j], rx[j], own[j], by[j] = b, a, reps[b], reps[a], b, a
    a, b, i = cl[stand], of[stand], place[stand]     # (to the stand-in, from it)
    src[i], dst[i], tx[i], rx[i], own[i], by[i] = a, b, reps[a], stand_in, a, b
    j = i + 1
    src[j], dst[j], tx[j], rx[j], own[j], by[j] = b, a, stand_in, reps[a], a, b
    lead[i], lead[j] = back[b], out[b]
    follows = lead >= 0
    columns = [[] for _ in range(10)]      # src, dst, lat, per byte, tx, rx, lead, parts (3)
    for r in range(rph):
        ranks = reps * rph + r
        lat, per_byte, _ = run.link(ranks, ranks ^ (rph << k), "all_reduce")   # (own partner)
        # (classes that pair off: the link between their hosts must be each one's own
        # partner's; a follower's must be its leader's)
        a, b = cl[lower], of[lower]
        paired = run.link(ranks[a], ranks[b], "all_reduce")[:2]
        if not all(np.array_equal(x, y[a]) and np.array_equal(x, y[b])
                   for x, y in zip(paired, (lat, per_byte))):
            return None
        theirs = own[lead[follows]]
        if not (np.array_equal(lat[own[follows]], lat[theirs])
                and np.array_equal(per_byte[own[follows]], per_byte[theirs])):
            return None
        base = r * n                             # (this rank's messages within the step)
        for column, value in zip(columns, (
                src * rph + r, dst * rph + r, lat[own], per_byte[own], tx, rx,
                np.where(follows, base + lead, -1), np.where(follows, by, -1),
                np.where(follows, own, -1), np.where(follows, k, -1))):
            column.append(value)
        ghosts = np.flatnonzero(follows)
        rows.append((by[ghosts] * rph + r, np.full(ghosts.size, fast_queues.GHOST),
                     first + base + ghosts, np.zeros(ghosts.size, np.int64),
                     np.zeros(ghosts.size)))
        rows.append((cl * rph + r, np.full(count, fast_queues.EXCHANGE), first + base + out,
                     first + base + back, np.zeros(count)))
    src, dst, lat, per_byte, tx, rx, lead, *parts = (np.concatenate(x) for x in columns)
    return ([src, dst, np.full(src.size, mult), lat.astype(float), per_byte.astype(float),
             tx, rx, lead], np.stack(parts).astype(np.int64))


def added(p: Plan, nbytes: float, messages, leads: list, parts: list, average: bool) -> list:
    """The all-reduce of ``nbytes`` as each position's actions (``fast_queues`` programs: a
    ROWS action each, on rows added to ``messages``' table; the divide after the steps where
    ``average``), its messages added to ``messages`` (a ``fast_queues.Messages``), their
    leaders (by id, -1: none) to ``leads`` and their parts (``Plan.parts``) to ``parts``:
    in the arithmetic ``Schedule.added`` takes (bytes mult x n, then seconds a byte; work x n)."""
    first = messages.count
    for cols, step_parts in zip(p.messages, p.parts):
        src, dst, mult, lat, per_byte, tx, rx, lead = cols
        size = mult * nbytes
        at = messages.add([src, dst, lat, size * per_byte, tx, rx, size])
        leads.append(np.where(lead >= 0, lead + at, -1))
        parts.append(step_parts)
    kinds, a, b, work = p.rows
    bounds = p.bounds
    keep = np.ones(kinds.size, dtype=bool)
    if not average:                              # (each position's last row: the divide)
        keep[bounds[1:] - 1] = False
        bounds = bounds - np.arange(bounds.size)
    table = fast_queues.action_table(kinds[keep], a[keep] + np.where(
        kinds[keep] == fast_queues.GLOO, 0, first), b[keep] + np.where(
        kinds[keep] == fast_queues.EXCHANGE, first, 0), work[keep] * nbytes)
    at = messages.add_rows(table)
    lo, hi = (at + bounds[:-1]).tolist(), (at + bounds[1:]).tolist()
    return [[(fast_queues.ROWS, x, y)] for x, y in zip(lo, hi)]


def parted(grants, lead) -> np.ndarray:
    """The followers that did not act as their leaders (the module's 3.): each must start
    (both sides posted), be granted its transmit direction (its own, or its leader's grant as
    it took it where that side stands in) and its receive direction at its leader's instants.
    (NaN, never reached, is never equal.)"""
    started, tx_at, rx_at = grants
    f = np.flatnonzero(lead >= 0)
    m = lead[f]
    alike = (started[f] == started[m]) & (tx_at[f] == tx_at[m]) & (rx_at[f] == rx_at[m])
    return f[~alike]


def refined(cls, parts) -> np.ndarray:
    """``cls`` with each class that acted apart split (``Plan.parts``, per message that did
    not act as its leader: the class it stood in for, the class it met, the bit): its hosts
    that meet that class at that bit become a class of their own.  Where the class met is one
    host, the hosts it meets in the steps after (flipping the bits below that bit) and those
    they meet, its subcube of those bits, each become a class of its own at once: a host
    alone delays them each by its own path, and split a layer a round they took up to eight
    rounds (a ring beside 1 Mbit/s at 65,536 ranks; one now)."""
    every = np.arange(cls.size)
    out, bits = cls.copy(), 0
    alone = np.zeros(cls.size, dtype=bool)
    single = np.bincount(cls) == 1
    for of, own, k in sorted(set(map(tuple, parts.T.tolist()))):
        if bits == 40:                           # (the key's room: numbered densely again)
            out, bits = np.unique(out, return_inverse=True)[1].astype(np.int64), 0
        out = out * 2 + ((cls == of) & (cls[every ^ (1 << k)] == own))
        bits += 1
        if single[own]:
            alone[np.flatnonzero(cls == own)[0] ^ np.arange(1, 2 << k)] = True
    out = np.where(alone, out.max() + 1 + every, out)
    return np.unique(out, return_inverse=True)[1].astype(np.int64)
