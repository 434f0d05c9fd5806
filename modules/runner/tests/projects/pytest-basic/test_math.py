"""One passing and one failing test, for the sandbox tests."""


def add(a, b):
    return a + b


def test_adds_small_numbers():
    assert add(2, 2) == 4


def test_fails_on_purpose():
    assert add(2, 2) == 5
