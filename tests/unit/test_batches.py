import pytest

from provision.errors import InputError
from provision.runner.batches import batch_sizes, batches, parse_serial, too_many_failed


def test_ramp_like_ansible():
    # Ansible: serial [1, "25%", "100%"] over 10 hosts -> 1, 2, then the remaining 7
    assert batch_sizes([1, "25%", "100%"], 10) == [1, 2, 7]


def test_last_item_repeats():
    assert batch_sizes([2], 5) == [2, 2, 1]


def test_percent_rounds_down_but_at_least_one():
    assert batch_sizes(["10%"], 4) == [1, 1, 1, 1]


def test_no_serial_is_one_batch():
    assert batches(list("abc"), None) == [["a", "b", "c"]]


def test_parse_serial():
    assert parse_serial("1,25%,100%") == [1, "25%", "100%"]


@pytest.mark.parametrize("text", ["0", "x", "-1", "25%%", ""])
def test_parse_serial_refuses(text):
    with pytest.raises(InputError, match="serial"):
        parse_serial(text)


def test_max_fail():
    assert too_many_failed(1, 4, 20.0)
    assert not too_many_failed(1, 10, 20.0)
    assert not too_many_failed(3, 4, None)
    assert too_many_failed(4, 4, None)
