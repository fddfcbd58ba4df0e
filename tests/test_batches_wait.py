"""supervisor.wait() and Batch.wait() against real PostgreSQL. The fallback poll is
set to a minute, so a waiter that returns sooner was woken by its notification."""

import threading

import psycopg
import pytest
from e2e import wait_until

import supervisor
from shared import listening, waiting
from shared.batches import Callback
from shared.enqueue import enqueue, enqueue_many

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]  # processes or waits: CI lane


@pytest.fixture(autouse=True)
def _no_polling(monkeypatch):
    monkeypatch.setattr(waiting, "FALLBACK_POLL", 60.0)


def in_thread(fn):
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, box


def watched(conn, job_id):
    return conn.execute("SELECT watched FROM supervisor.jobs WHERE id = %s",
                        (job_id,)).fetchone()[0]


def test_wait_returns_the_result_when_the_job_completes(conn, dsn):
    job_id = enqueue("bt_member", {"n": 7}, dsn=dsn)
    t, box = in_thread(lambda: supervisor.wait(job_id, timeout=40, dsn=dsn))
    wait_until(lambda: watched(conn, job_id), what="the waiter to watch the job")
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now(), "
                 "result = '{\"ok\": 7}' WHERE id = %s", (job_id,))
    t.join(15)  # woken by the notification, well before the 40 s timeout
    assert not t.is_alive()
    assert box == {"value": {"ok": 7}}


def test_wait_raises_job_failed_with_the_last_error(conn, dsn):
    job_id = enqueue("bt_member", {}, dsn=dsn)
    t, box = in_thread(lambda: supervisor.wait(job_id, timeout=40, dsn=dsn))
    wait_until(lambda: watched(conn, job_id), what="the waiter to watch the job")
    conn.execute("""UPDATE supervisor.jobs SET state = 'discarded', finished_at = now(),
                    errors = '[{"message": "first"}, {"message": "boom"}]' WHERE id = %s""",
                 (job_id,))
    t.join(15)  # woken by the notification, well before the 40 s timeout
    assert not t.is_alive()
    err = box["error"]
    assert isinstance(err, supervisor.JobFailed)
    assert (err.job_id, err.state, err.error["message"]) == (job_id, "discarded", "boom")


def test_wait_on_a_finished_missing_or_slow_job(conn, dsn):
    done = enqueue("bt_member", {}, dsn=dsn)
    conn.execute("UPDATE supervisor.jobs SET state = 'cancelled', finished_at = now() "
                 "WHERE id = %s", (done,))
    with pytest.raises(supervisor.JobFailed, match="cancelled"):
        supervisor.wait(done, timeout=5, dsn=dsn)
    with pytest.raises(supervisor.JobNotFound):
        supervisor.wait(123456789, timeout=5, dsn=dsn)
    slow = enqueue("bt_member", {}, dsn=dsn)
    with pytest.raises(TimeoutError):
        supervisor.wait(slow, timeout=0.2, dsn=dsn)
    with pytest.raises(TypeError):
        supervisor.wait("1", dsn=dsn)


def test_batch_wait_returns_the_summary_once_closed(conn, dsn, monkeypatch):
    batch = enqueue_many("bt_member", [{}, {}, {}], then=Callback("bt_callback", {}), dsn=dsn)
    listening_now = threading.Event()
    real_listen = listening.Listener.listen

    def noting_listen(self, *args):
        listening_now.set()  # it has read the batch once and waits for its notification
        return real_listen(self, *args)

    monkeypatch.setattr(listening.Listener, "listen", noting_listen)
    t, box = in_thread(lambda: supervisor.batch(batch.id, dsn=dsn).wait(timeout=40))
    assert listening_now.wait(20)
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE id = ANY(%s)", (batch.ids[:2],))
    conn.execute("UPDATE supervisor.jobs SET state = 'discarded', finished_at = now() "
                 "WHERE id = ANY(%s)", (batch.ids[2:],))
    t.join(15)  # woken by the notification, well before the 40 s timeout
    assert not t.is_alive()
    summary = box["value"]
    assert (summary.total, summary.completed, summary.discarded) == (3, 2, 1)
    assert summary.callback_id is not None
    with pytest.raises(LookupError):
        supervisor.batch(987654, dsn=dsn)


def test_plain_completions_send_no_notification(conn, dsn):
    plain = enqueue("bt_member", {}, dsn=dsn)
    watched_id = enqueue("bt_member", {}, dsn=dsn)
    conn.execute("UPDATE supervisor.jobs SET watched = true WHERE id = %s", (watched_id,))
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {waiting.CHANNEL}")
        for job_id in (plain, watched_id):  # two commits, delivered in this order
            conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                         "WHERE id = %s", (job_id,))
        heard = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
    assert heard == [f"j{watched_id}"]


def test_a_missed_notification_is_made_up_by_the_fallback_poll(conn, dsn, monkeypatch):
    monkeypatch.setattr(waiting, "FALLBACK_POLL", 0.2)
    job_id = enqueue("bt_member", {}, dsn=dsn)
    t, box = in_thread(lambda: supervisor.wait(job_id, timeout=40, dsn=dsn))
    wait_until(lambda: watched(conn, job_id), what="the waiter to watch the job")
    # Clearing watched in the same statement: the trigger sends nothing, as if lost.
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now(), "
                 "result = '5', watched = false WHERE id = %s", (job_id,))
    t.join(15)
    assert box == {"value": 5}
