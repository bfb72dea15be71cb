# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Dead letters: the queue that holds a queue's, the headers that say why, and what an operator reads of them. Used by
the gate inside a Celery worker and by the operators' commands. Standard library only."""

from __future__ import annotations

import datetime

from .names import DEAD_HEADER, DEAD_PREFIX, REQUEUES_HEADER

# A redelivery is counted in the broker under this key for this long (a message waits at most the visibility timeout
# between two deliveries; a week covers any sane one).
DELIVERIES_TTL = 7 * 86400


def dead_letter_queue(queue: str) -> str:
    """Where the dead letters of `queue` wait: sturdy.dead.<queue> (no worker consumes it)."""
    return queue if queue.startswith(DEAD_PREFIX) else DEAD_PREFIX + queue


def deliveries_key(headers: dict) -> str:
    """The broker key counting the redeliveries of one message: a retry (a new message with the same id) and a
    requeued dead letter start again from zero."""
    return "sturdy.deliveries.{}.{}.{}".format(headers.get("id"), headers.get("retries") or 0,
                                               headers.get(REQUEUES_HEADER) or 0)


def dead_headers(headers: dict, reason: str, queue: str, deliveries, build, host: str, now: float) -> dict:
    """The message's headers plus why, where from, on which build and host, when, after how many deliveries."""
    dead = {k: v for k, v in headers.items() if k != "redelivered"}
    marks = {"reason": reason, "queue": queue, "build": build, "host": host, "at": now, "deliveries": deliveries}
    dead.update({DEAD_HEADER + k: v for k, v in marks.items()})
    return dead


def requeue_headers(headers: dict) -> dict:
    """A dead letter's headers as it goes back to its queue: counted afresh, the dead-letter marks removed."""
    fresh = {k: v for k, v in headers.items()
             if not k.startswith((DEAD_HEADER, "x-death", "x-first-death", "x-last-death", "x-delivery-count"))
             and k != "redelivered"}
    fresh[REQUEUES_HEADER] = int(headers.get(REQUEUES_HEADER) or 0) + 1
    return fresh


BROKER_DEATHS = {
    "delivery_limit": "delivered more times than the queue's delivery-limit allows (RabbitMQ dead-lettered it: the "
                      "consumer that took it had no sturdy agent)",
    "rejected": "rejected without requeue by its consumer (RabbitMQ dead-lettered it)",
    "expired": "expired in its queue (RabbitMQ dead-lettered it)",
    "maxlen": "dropped by its queue's length limit (RabbitMQ dead-lettered it)",
}


def broker_death(headers: dict) -> dict:
    """A message the broker dead-lettered itself (RabbitMQ's x-death) in the agent's own terms."""
    deaths = headers.get("x-death") or []
    if headers.get(DEAD_HEADER + "reason") or not deaths or not isinstance(deaths[0], dict):
        return headers
    first = deaths[0]
    at = first.get("time")
    view = dict(headers)
    marks = {"reason": BROKER_DEATHS.get(str(first.get("reason")), f"dead-lettered by the broker: {first.get('reason')}"),
             "queue": first.get("queue"), "deliveries": headers.get("x-delivery-count"),
             # py-amqp decodes the AMQP timestamp as a naive UTC datetime.
             "at": at.replace(tzinfo=datetime.timezone.utc).timestamp() if hasattr(at, "replace") else at}
    view.update({DEAD_HEADER + k: v for k, v in marks.items()})
    return view


def describe_dead(headers_list: list[dict], now: float, sample: int = 5) -> dict:
    """What an operator needs about a dead-letter queue: count, reasons, tasks, oldest, a few entries. Never the
    arguments (they can hold personal data or secrets): names, ids, reasons and times only."""
    headers_list = [broker_death(h) for h in headers_list]
    reasons: dict[str, int] = {}
    tasks: dict[str, int] = {}
    times = []
    for h in headers_list:
        reason = str(h.get(DEAD_HEADER + "reason") or "no reason recorded")
        reasons[reason] = reasons.get(reason, 0) + 1
        tasks[str(h.get("task"))] = tasks.get(str(h.get("task")), 0) + 1
        if isinstance(h.get(DEAD_HEADER + "at"), (int, float)):
            times.append(h[DEAD_HEADER + "at"])
    entries = []
    for h in headers_list[:sample]:
        at = h.get(DEAD_HEADER + "at")
        entries.append({"id": h.get("id"), "task": h.get("task"),
                        **{k: h.get(DEAD_HEADER + k) for k in ("reason", "deliveries", "build", "host")},
                        "requeues": h.get(REQUEUES_HEADER) or 0,
                        "age": round(now - at, 1) if isinstance(at, (int, float)) else None})
    return {"count": len(headers_list), "reasons": reasons, "tasks": tasks,
            "oldest_age": round(now - min(times), 1) if times else None, "sample": entries}
