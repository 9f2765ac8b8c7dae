"""``bench/matching.py``'s machine-wide CPU reading (``machine_busy`` of the engine cases), from /proc/stat."""

import time

from bench import matching


def test_busy_ticks_leave_out_idle_and_iowait_and_the_guest_columns():
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat = "cpu  100 7 50 800 20 5 5 3 40 2\ncpu0 50 3 25 400 10 2 2 1 20 1\n"

    assert matching.machine_cpu_jiffies(stat) == (170, 990)


def test_an_unreadable_line_reads_as_nothing_measured():
    assert matching.machine_cpu_jiffies("cpu  1 2\n") == (0, 0)
    assert matching.machine_cpu_jiffies("intr 5 x\n") == (0, 0)


def test_a_busy_loop_shows_as_busy_time_of_this_machine():
    busy_before, total_before = matching.machine_cpu_jiffies()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        pass
    busy_after, total_after = matching.machine_cpu_jiffies()

    assert busy_after - busy_before >= 10  # 0.3 s of one core at 100 ticks per second, less rounding
    assert 0 < busy_after - busy_before <= total_after - total_before
