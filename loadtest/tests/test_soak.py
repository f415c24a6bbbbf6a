"""The soak's judgement of open fds (loadtest/soak.py fds_check): a worker busy with a
request at every sample (its provider socket open) is not a leak; a worker whose fds stay
higher once the load has stopped, idle, than when it was last seen idle is."""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "loadtest")]

import soak  # noqa: E402


class FdsCheck(unittest.TestCase):
    def test_a_worker_busy_at_every_sample_is_not_a_leak(self):
        # A clean CI run (2026-12-07): one worker seen mid-request (9 + its provider
        # socket and its poll fd) in four samples in a row, 9 once the load stopped.
        settled = [{1: 9, 2: 9}, {1: 9, 2: 9}, {1: 9, 2: 11}, {1: 9, 2: 11}, {1: 9, 2: 11}, {1: 9, 2: 11}]
        holds, text = soak.fds_check(settled, {1: 9, 2: 9})
        self.assertTrue(holds, text)

    def test_fds_that_stay_open_after_the_load_are_a_leak(self):
        settled = [{1: 9, 2: 9}, {1: 9, 2: 10}, {1: 10, 2: 10}, {1: 11, 2: 12}]
        holds, text = soak.fds_check(settled, {1: 12, 2: 13})
        self.assertFalse(holds, text)
        self.assertIn("worker 1: 9 -> 12", text)

    def test_one_leaking_worker_is_enough(self):
        settled = [{1: 9, 2: 9}, {1: 9, 2: 9}]
        holds, _ = soak.fds_check(settled, {1: 9, 2: 10})
        self.assertFalse(holds)

    def test_a_worker_first_seen_late_is_judged_by_what_was_seen_of_it(self):
        # php-fpm started worker 3 during the run: its floor is its own samples'.
        settled = [{1: 9}, {1: 9, 3: 11}, {1: 9, 3: 9}]
        holds, _ = soak.fds_check(settled, {1: 9, 3: 9})
        self.assertTrue(holds)
        holds, _ = soak.fds_check(settled, {1: 9})
        self.assertTrue(holds, "a worker gone at the end is not judged")

    def test_no_worker_left_at_the_end_fails(self):
        holds, text = soak.fds_check([{1: 9}], {})
        self.assertFalse(holds, text)


if __name__ == "__main__":
    unittest.main()
