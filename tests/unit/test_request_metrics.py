"""The API's request metrics middleware (services/api/app.py RequestMetrics): every request
counted by route and status, a route that raises counted as the 500 it becomes, and a
stream timed to its first byte, not to its end (on a FAKE clock: the middleware's)."""

from __future__ import annotations

from types import SimpleNamespace

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient

from services.api import app as app_module
from services.api.app import Metrics, RequestMetrics


def _app() -> tuple[FastAPI, Metrics]:
    metrics = Metrics("r1")
    app = FastAPI()

    @app.get("/ok/{n}")
    def ok(n: int) -> dict:
        return {"n": n}

    @app.get("/boom")
    def boom() -> dict:
        raise RuntimeError("broken route")

    app.add_middleware(RequestMetrics, metrics=metrics)
    return app, metrics


def _value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.counted.get_sample_value(name, labels) or 0.0


def test_requests_are_counted_by_route_template_and_status():
    app, metrics = _app()
    with TestClient(app) as client:
        assert client.get("/ok/1").status_code == 200
        assert client.get("/ok/2").status_code == 200
        assert client.get("/nowhere").status_code == 404
    total = "dlaas_api_requests_total"
    assert _value(metrics, total, method="GET", route="/ok/{n}", status="200") == 2
    assert _value(metrics, total, method="GET", route="unmatched", status="404") == 1


def test_a_route_that_raises_is_counted_as_a_500():
    app, metrics = _app()
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/boom").status_code == 500
    labels = {"method": "GET", "route": "/boom", "status": "500"}
    assert _value(metrics, "dlaas_api_requests_total", **labels) == 1


def test_a_stream_is_timed_to_its_first_byte(monkeypatch):
    clock = [100.0]  # the middleware's perf_counter, moved only by the stream below
    monkeypatch.setattr(app_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    app, metrics = _app()

    @app.get("/slow-stream")
    async def slow_stream() -> StreamingResponse:
        async def body():
            yield b"first\n"
            clock[0] += 0.5  # the rest of the stream takes half a second
            yield b"last\n"

        return StreamingResponse(body())

    with TestClient(app) as client:
        assert client.get("/slow-stream").text == "first\nlast\n"
    assert clock[0] == 100.5
    labels = {"method": "GET", "route": "/slow-stream"}
    assert _value(metrics, "dlaas_api_request_seconds_count", **labels) == 1
    assert _value(metrics, "dlaas_api_request_seconds_sum", **labels) < 0.4
