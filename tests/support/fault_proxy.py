"""A TCP proxy on loopback that breaks replies on demand: the transport's fault proxy.

  python3 fault_proxy.py TARGET_PORT CONTROL_FILE [LISTEN_PORT]

Forwards every connection to 127.0.0.1:TARGET_PORT and prints "listening PORT" on its
first line of output once it accepts (LISTEN_PORT 0 or none: a free port). The bytes go
through as they are (plain RESP or TLS records alike), except that a reply from the server
(the next chunk the server sends on any connection) can be broken by a fault read from
CONTROL_FILE. Each line of the file is one fault, used by one reply and then removed from
the file (a test writes the faults it wants before the command):

  fin           the reply is dropped; the client's connection is closed (FIN) and so is the
                server's: the command ran, its answer never arrives
  rst           the same, the client's connection reset (RST)
  half          the first half of the reply is forwarded, then FIN
  hold          the reply is dropped and the connection kept open: an answer that never
                comes
  garble        the reply is replaced by bytes of the same length that are not RESP
  delay MS      the reply is forwarded after MS milliseconds
  trickle MS    the reply, and everything after it on that connection, goes a byte at a
                time, MS milliseconds apart
  wrongtype     the reply is replaced by `:1` (well-formed RESP of the wrong shape)
  dup           the reply is sent twice in one chunk (bytes nobody asked for after it)
  extra MS      the reply, then MS milliseconds later an unasked `+UNASKED`

A line `cut N` in CONTROL_FILE.up (the other direction) cuts the client's next bytes to
the server: N more bytes are forwarded, then the client is reset (a request, or a
pipeline of them, broken partway while it is written).

Standard library only; one thread per direction and connection. Bounded: it serves until
killed, and the tests that start it stop it.
"""

import os
import socket
import struct
import sys
import threading
import time

lock = threading.Lock()


def next_fault(path: str) -> list[str] | None:
    """Takes the first line of CONTROL_FILE (None: no fault waiting)."""
    with lock:
        try:
            with open(path) as f:
                lines = [l.strip() for l in f.read().splitlines() if l.strip()]
        except OSError:
            return None
        if not lines:
            return None
        with open(path + ".tmp", "w") as f:
            f.write("".join(l + "\n" for l in lines[1:]))
        os.replace(path + ".tmp", path)
        return lines[0].split()


def close(sock: socket.socket, reset: bool = False) -> None:
    try:
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def upstream(client: socket.socket, server: socket.socket, control: str) -> None:
    cut = None
    try:
        while data := client.recv(65536):
            if cut is None:
                fault = next_fault(control + ".up")
                if fault and fault[0] == "cut":
                    cut = int(fault[1])
            if cut is not None:
                part = data[:cut]
                server.sendall(part)
                cut -= len(part)
                if cut <= 0:
                    # The server reads what it got before the client's side goes.
                    time.sleep(0.2)
                    close(client, reset=True)
                    close(server)
                    return
                continue
            server.sendall(data)
    except OSError:
        pass
    try:
        server.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def downstream(server: socket.socket, client: socket.socket, control: str) -> None:
    trickle = 0.0
    try:
        while data := server.recv(65536):
            fault = next_fault(control)
            if fault:
                what, arg = fault[0], (float(fault[1]) / 1000 if len(fault) > 1 else 0.0)
                if what in ("fin", "rst"):
                    close(client, reset=what == "rst")
                    close(server)
                    return
                if what == "half":
                    client.sendall(data[: max(1, len(data) // 2)])
                    close(client)
                    close(server)
                    return
                if what == "hold":
                    # Nothing more goes to the client; the connections stay open until the
                    # client gives up.
                    while server.recv(65536):
                        pass
                    return
                if what == "garble":
                    data = (b"?garbled" + b"#" * len(data))[: len(data)]
                elif what == "wrongtype":
                    data = b":1\r\n"
                elif what == "dup":
                    data = data + data
                elif what == "extra":
                    client.sendall(data)
                    time.sleep(arg)
                    data = b"+UNASKED\r\n"
                elif what == "delay":
                    time.sleep(arg)
                elif what == "trickle":
                    trickle = arg
            if trickle:
                for i in range(len(data)):
                    client.sendall(data[i : i + 1])
                    time.sleep(trickle)
            else:
                client.sendall(data)
    except OSError:
        pass
    close(client)


def main() -> None:
    target, control = int(sys.argv[1]), sys.argv[2]
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    print(f"listening {listener.getsockname()[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        try:
            server = socket.create_connection(("127.0.0.1", target))
        except OSError:
            close(client, reset=True)
            continue
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=upstream, args=(client, server, control), daemon=True).start()
        threading.Thread(target=downstream, args=(server, client, control), daemon=True).start()


if __name__ == "__main__":
    main()
