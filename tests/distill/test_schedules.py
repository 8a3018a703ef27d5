import pytest

from edgekd.config import Schedule


@pytest.mark.parametrize(
    "schedule,expected",
    [
        (Schedule(kind="linear", start=4, end=1), [4, 3, 2, 1]),
        (Schedule(kind="cosine", start=4, end=0), [4, 3, 1, 0]),  # 2·(1+cos(π·k/3)): 4, 3, 1, 0
        (Schedule(kind="step", start=1, every=2, factor=0.5), [1, 1, 0.5, 0.5]),
        (Schedule(kind="constant", start=2), [2, 2, 2, 2]),
    ],
)
def test_schedule_values_per_epoch(schedule, expected):
    assert [schedule.value(e, 4) for e in range(1, 5)] == pytest.approx(expected)
