"""The gateway's log lines are written by threads of their own, not in its event loop (gateway.__main__)."""

from __future__ import annotations

import io
import logging
import threading

import pytest

from gateway.__main__ import log_off_the_loop

pytestmark = pytest.mark.gateway


def test_a_logger_hands_its_records_to_a_thread_that_writes_them_with_its_own_handlers_and_formats():
    out = io.StringIO()
    written_by: list[str] = []

    class Recording(logging.StreamHandler):
        def emit(self, record: logging.LogRecord) -> None:
            written_by.append(threading.current_thread().name)
            super().emit(record)

    handler = Recording(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("gateway-test-offloop")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.handlers = [handler]
    try:
        listeners = log_off_the_loop(("gateway-test-offloop", "gateway-test-no-handlers"))
        assert len(listeners.listeners) == 1  # a logger without handlers is left alone
        assert [type(h).__name__ for h in log.handlers] == ["_Enqueue"]
        log.info("request %s: %d", "abc", 7)
        log.debug("not at this level")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
        listeners.stop()  # everything logged is written by then
    finally:
        log.handlers = []
    text = out.getvalue()
    assert text.startswith("INFO gateway-test-offloop: request abc: 7\nERROR gateway-test-offloop: failed\n")
    assert "ValueError: boom" in text and "not at this level" not in text
    assert written_by and threading.main_thread().name not in written_by
