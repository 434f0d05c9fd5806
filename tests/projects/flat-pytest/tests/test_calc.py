import calc


def test_add():
    assert calc.add(2, 3) == 5


def test_divide():
    assert calc.divide(9, 3) == 3


def test_add_fails_on_purpose():
    assert calc.add(2, 2) == 5
