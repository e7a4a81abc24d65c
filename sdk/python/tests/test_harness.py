"""Tests of the harness itself."""

import socket
import unittest

from harness import _LOWEST_PORT, _ephemeral_low, free_port


class FreePortTest(unittest.TestCase):
    def test_below_the_ephemeral_range_bindable_and_never_twice(self) -> None:
        high = _ephemeral_low()
        seen = set()
        for _ in range(200):
            port = free_port()
            self.assertGreaterEqual(port, _LOWEST_PORT)
            self.assertLess(port, high)
            self.assertNotIn(port, seen)
            seen.add(port)
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            finally:
                s.close()


if __name__ == "__main__":
    unittest.main()
