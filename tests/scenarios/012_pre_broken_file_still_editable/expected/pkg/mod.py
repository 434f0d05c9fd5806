def ok():
    return 1


def broken(:
    pass


def other():
    return 3
