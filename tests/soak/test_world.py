"""The soak's Gate: what the fault injector cuts the database and the cloud cluster off with."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.soak.world import Gate


def test_a_shut_gate_refuses_and_cuts_and_an_open_one_forwards_on_the_same_port() -> None:
    upstream = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = upstream.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.sendall(b"hi")
            conn.recv(1)  # until the gate lets go

    threading.Thread(target=serve, daemon=True).start()
    gate = Gate(upstream.getsockname()[1])
    try:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", gate.port), timeout=5) as held:
                assert held.recv(2) == b"hi"
                gate.shut()  # with a connection open through it
                assert held.recv(2) == b""  # cut
                with pytest.raises(ConnectionRefusedError):
                    socket.create_connection(("127.0.0.1", gate.port), timeout=5)
            gate.open()
    finally:
        gate.close()
        upstream.close()
