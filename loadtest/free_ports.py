"""N distinct free TCP ports on loopback, one a line: all bound at once, so they differ.

  python3 loadtest/free_ports.py [N]
"""

import socket
import sys


def free_ports(n: int) -> list:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


if __name__ == "__main__":
    print("\n".join(str(p) for p in free_ports(int(sys.argv[1]) if len(sys.argv) > 1 else 1)))
