"""A flat layout: this module sits next to tests/, with no package and no pytest config."""


def add(a, b):
    return a + b


def divide(a, b):
    return a / b
