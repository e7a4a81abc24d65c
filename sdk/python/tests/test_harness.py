"""Tests of the harness itself."""

import unittest

from harness import PortBlock


class PortBlockTest(unittest.TestCase):
    def test_each_port_of_the_block_once_then_an_error(self) -> None:
        block = PortBlock(20000, 3)
        self.assertEqual([block.take() for _ in range(3)], [20000, 20001, 20002])
        with self.assertRaises(RuntimeError):
            block.take()


if __name__ == "__main__":
    unittest.main()
